// browser.test.js — the pages in a real browser: Debian's headless Chromium (/usr/bin/chromium)
// driven by playwright-core (which never downloads a browser). A small proxy in front of tallyd
// serves the pages and can delay or refuse writes (503), as a struggling server would.
// TALLY_SCREENSHOTS=DIR saves pictures of the button and of the operator's page there.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request } from 'node:http';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { startTallyd } from './helpers.js';

const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const SHOTS = process.env.TALLY_SCREENSHOTS || '';
let tallyd, proxy, browser;

/** A proxy to tallyd that records the item writes and may delay or refuse them. */
function startProxy(target) {
  const state = { refuse: 0, delayMs: 0, writes: [] };
  const server = createServer((req, res) => {
    const write = req.url.startsWith('/v1/items/') && ['PUT', 'DELETE', 'POST'].includes(req.method);
    if (write) state.writes.push({ method: req.method, url: req.url, key: req.headers['idempotency-key'] });
    if (write && state.refuse > 0) {
      state.refuse--;
      req.resume();
      res.writeHead(503, { 'content-type': 'application/problem+json', 'retry-after': '1' });
      res.end('{"type":"urn:tally:error:overloaded","title":"overloaded","status":503,"detail":"the test proxy refuses"}');
      return;
    }
    const forward = () => {
      const up = request(target + req.url, { method: req.method, headers: req.headers }, (ur) => {
        res.writeHead(ur.statusCode, ur.headers);
        ur.pipe(res);
      });
      up.on('error', () => res.destroy());
      req.pipe(up);
    };
    if (write && state.delayMs) setTimeout(forward, state.delayMs);
    else forward();
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => {
    resolve({ url: `http://127.0.0.1:${server.address().port}`, state, close: () => { server.closeAllConnections(); server.close(); } });
  }));
}

before(async () => {
  tallyd = await startTallyd({ args: ['--rate-limit', 'off'] });
  proxy = await startProxy(tallyd.url);
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu'] });
});

after(async () => {
  await browser?.close();
  proxy?.close();
  await tallyd?.stop();
});

/** A fresh page (its own storage) on the demo, as user; collects CSP violations and page errors. */
async function demo(user) {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.problems = [];
  page.on('console', (m) => { if (/Content Security Policy|Refused to/.test(m.text())) page.problems.push(m.text()); });
  page.on('pageerror', (e) => page.problems.push(e.message));
  await page.goto(`${proxy.url}/ui/?user=${user}`);
  await page.waitForSelector('body[data-ready="true"]');
  await page.waitForSelector('tally-reactions[item="post-3"] .tally-count:text("0")');
  return page;
}

const button = (page, item, kind) => page.locator(`tally-reactions[item="${item}"] button[data-kind="${kind}"]`);
const countOf = async (page, item, kind) => (await button(page, item, kind).locator('.tally-count').textContent()).trim();
const serverCounts = async (item) => (await (await fetch(`${tallyd.url}/v1/items/${item}`)).json()).counts;

async function settle(page, item) {
  await page.waitForFunction((id) => !document.querySelector(`tally-reactions[item="${id}"]`).hasAttribute('busy'), item);
}

async function converged(item, kind, n) {
  for (let i = 0; i < 100; i++) {
    if ((await serverCounts(item))[kind] === n) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.fail(`${item} ${kind} never reached ${n}: ${JSON.stringify(await serverCounts(item))}`);
}

test('the demo page loads: buttons with counts, a CSP without inline script, no violations', async () => {
  const res = await fetch(`${proxy.url}/ui/`);
  const csp = res.headers.get('content-security-policy');
  assert.match(csp, /script-src 'self'/);
  assert.doesNotMatch(csp, /unsafe-inline/);
  assert.doesNotMatch(await res.text(), /<script(?![^>]*\bsrc=)[^>]*>/, 'an inline script');
  const page = await demo('viewer-a');
  assert.equal(await button(page, 'post-1', 'like').getAttribute('aria-pressed'), 'false');
  assert.equal(await countOf(page, 'post-1', 'like'), '0');
  assert.equal(await page.locator('tally-reactions button').count(), 6);
  assert.equal(await button(page, 'post-1', 'like').evaluate((b) => b.tagName), 'BUTTON');
  assert.deepEqual(page.problems, []);
  await page.context().close();
});

test('a click sets aria-pressed and the count, and is saved', async () => {
  const page = await demo('clicker');
  await button(page, 'post-1', 'like').click();
  await settle(page, 'post-1');
  assert.equal(await button(page, 'post-1', 'like').getAttribute('aria-pressed'), 'true');
  assert.equal(await countOf(page, 'post-1', 'like'), '1');
  // as assistive technology sees it: a pressed button named by its visible text
  assert.equal(await page.getByRole('button', { name: 'Like 1', pressed: true, exact: true }).count(), 1);
  await converged('post-1', 'like', 1);
  await page.reload();
  await page.waitForSelector('tally-reactions[item="post-1"] button[data-kind="like"][aria-pressed="true"]');
  if (SHOTS) await page.locator('main').screenshot({ path: join(SHOTS, 'button.png') });
  await page.context().close();
});

test('a double click counts once (clicks are ignored while one is in flight)', async () => {
  const page = await demo('double');
  proxy.state.delayMs = 300;
  const before = proxy.state.writes.length;
  try {
    await button(page, 'post-2', 'like').dblclick();
    await settle(page, 'post-2');
  } finally {
    proxy.state.delayMs = 0;
  }
  assert.equal(proxy.state.writes.length - before, 1, 'one write sent');
  const w = proxy.state.writes.at(-1);
  assert.deepEqual([w.method, w.url], ['PUT', '/v1/items/post-2/like']); // the state wanted, not a toggle
  assert.equal(await button(page, 'post-2', 'like').getAttribute('aria-pressed'), 'true');
  assert.equal(await countOf(page, 'post-2', 'like'), '1');
  await converged('post-2', 'like', 1);
  await page.context().close();
});

test('survives a 503: the retry carries the same Idempotency-Key and counts once', async () => {
  const page = await demo('survivor');
  const before = proxy.state.writes.length;
  proxy.state.refuse = 1;
  await button(page, 'post-3', 'dislike').click();
  await page.waitForSelector('tally-reactions[item="post-3"]:not([busy])', { timeout: 10000 });
  const writes = proxy.state.writes.slice(before);
  assert.equal(writes.length, 2);
  assert.ok(writes[0].key && writes[0].key === writes[1].key);
  assert.equal(await button(page, 'post-3', 'dislike').getAttribute('aria-pressed'), 'true');
  assert.equal(await countOf(page, 'post-3', 'dislike'), '1');
  await converged('post-3', 'dislike', 1);
  await page.context().close();
});

test('rolled back when the write fails for good', async () => {
  const page = await demo('clicker'); // holds like on post-1 (above)
  await page.waitForSelector('tally-reactions[item="post-1"] button[data-kind="like"][aria-pressed="true"]');
  proxy.state.refuse = 100;
  try {
    const click = button(page, 'post-1', 'dislike').click();
    await click;
    // optimistic at once: dislike pressed, like taken back
    await page.waitForSelector('tally-reactions[item="post-1"] button[data-kind="dislike"][aria-pressed="true"]', { timeout: 1000 });
    assert.equal(await countOf(page, 'post-1', 'like'), '0');
    await page.waitForSelector('tally-reactions[item="post-1"][error="overloaded"]', { timeout: 15000 });
  } finally {
    proxy.state.refuse = 0;
  }
  assert.equal(await button(page, 'post-1', 'dislike').getAttribute('aria-pressed'), 'false');
  assert.equal(await button(page, 'post-1', 'like').getAttribute('aria-pressed'), 'true');
  assert.equal(await countOf(page, 'post-1', 'like'), '1');
  assert.equal(await countOf(page, 'post-1', 'dislike'), '0');
  assert.match(await page.locator('tally-reactions[item="post-1"] .tally-status').textContent(), /unavailable/);
  assert.deepEqual(await serverCounts('post-1'), { like: 1, dislike: 0 });
  await page.context().close();
});

test('keyboard: Tab to a button, Enter presses it, Space takes it back', async () => {
  const page = await demo('keys');
  await button(page, 'post-2', 'dislike').focus();
  await page.keyboard.press('Shift+Tab');
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement.dataset.kind), 'dislike');
  await page.keyboard.press('Enter');
  await page.waitForSelector('tally-reactions[item="post-2"] button[data-kind="dislike"][aria-pressed="true"]');
  await settle(page, 'post-2');
  await converged('post-2', 'dislike', 1);
  await page.keyboard.press('Space');
  await page.waitForSelector('tally-reactions[item="post-2"] button[data-kind="dislike"][aria-pressed="false"]');
  await settle(page, 'post-2');
  await converged('post-2', 'dislike', 0);
  const w = proxy.state.writes.at(-1);
  assert.deepEqual([w.method, w.url], ['DELETE', '/v1/items/post-2/dislike']);
  await page.context().close();
});

test('the operator page renders figures, lists and charts', async () => {
  const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(e.message));
  await page.goto(`${proxy.url}/ui/admin`);
  await page.waitForSelector('body[data-loaded="true"]', { timeout: 10000 });
  await page.waitForFunction(() => document.querySelectorAll('#chart-rate polyline').length === 1);
  assert.match(await page.locator('#lag').textContent(), /^\d+(\.\d+)?$/);
  assert.match(await page.locator('#write-rate').textContent(), /^\d+(\.\d+)?$/);
  assert.match(await page.locator('#batch').textContent(), /^\d+(\.\d+)?$/);
  assert.equal(await page.locator('#drift').textContent(), '0');
  await page.waitForFunction(() => document.querySelectorAll('#changes tbody tr').length > 0);
  const items = await page.locator('#changes tbody tr td:nth-child(2)').allTextContents();
  assert.ok(items.includes('post-1'), `changes: ${items}`);
  const trending = await page.locator('#trending tbody tr td:first-child').allTextContents();
  assert.ok(trending.includes('post-1') || trending.includes('post-2'), `trending: ${trending}`);
  assert.equal(await page.locator('#error').textContent(), '');
  // a second refresh draws a rate from two samples
  await page.waitForFunction(() => /\d/.test(document.getElementById('updated').textContent));
  if (SHOTS) {
    await page.waitForTimeout(4500);
    await page.screenshot({ path: join(SHOTS, 'admin.png'), fullPage: true });
  }
  assert.deepEqual(problems, []);
  await context.close();
});

test('with --admin-listen the operator page works from the admin listener', async () => {
  const split = await startTallyd({ args: ['--admin-listen', '127.0.0.1:0'] });
  const context = await browser.newContext();
  try {
    assert.equal((await fetch(`${split.url}/v1/admin/hot`, { headers: { 'X-User-Id': 'admin' } })).status, 404);
    const page = await context.newPage();
    await page.goto(`${split.url}/ui/admin`); // the public listener: the page says where to go
    await page.waitForFunction(() => /admin listener/.test(document.getElementById('error').textContent));
    await page.goto(`${split.adminUrl}/ui/admin`);
    await page.waitForSelector('body[data-loaded="true"]', { timeout: 10000 });
    assert.equal(await page.locator('#error').textContent(), '');
  } finally {
    await context.close();
    await split.stop();
  }
});

/** A third party's site on its own origin: a page embedding the button from tally's URL (set later). */
function startSite() {
  const site = { tallyUrl: '' };
  const server = createServer((req, res) => {
    const files = {
      '/': ['text/html', '<!doctype html><title>a blog</title><script type="module" src="/embed.js"></script>'
        + '<p>My post</p><tally-reactions item="blog-1"></tally-reactions>'],
      '/embed.js': ['text/javascript', `import { configure } from '${site.tallyUrl}/ui/tally-reactions.js';\n`
        + 'configure({ userId: \'reader-x\' });\n'],
    };
    const f = files[req.url];
    res.writeHead(f ? 200 : 404, { 'content-type': f ? f[0] : 'text/plain' });
    res.end(f ? f[1] : '');
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => {
    site.url = `http://localhost:${server.address().port}`;
    site.close = () => { server.closeAllConnections(); server.close(); };
    resolve(site);
  }));
}

test('embedded in a page of another origin (--cors-origin): loads, counts and saves a click', async () => {
  const blog = await startSite();
  const cors = await startTallyd({ args: ['--cors-origin', blog.url] });
  blog.tallyUrl = cors.url;
  const context = await browser.newContext();
  try {
    const page = await context.newPage();
    await page.goto(blog.url);
    await page.waitForSelector('tally-reactions[item="blog-1"] button[data-kind="like"] .tally-count:text("0")', { timeout: 5000 });
    await page.locator('tally-reactions[item="blog-1"] button[data-kind="like"]').click();
    await page.waitForSelector('tally-reactions[item="blog-1"]:not([busy]) button[data-kind="like"][aria-pressed="true"]');
    assert.equal(await page.locator('tally-reactions[item="blog-1"]').getAttribute('error'), null);
    const item = await (await fetch(`${cors.url}/v1/items/blog-1`, { headers: { 'X-User-Id': 'reader-x' } })).json();
    assert.equal(item.viewer.reaction, 'like');
    // an origin tally does not allow: the module script itself is refused
    const other = await context.newPage();
    const errors = [];
    other.on('console', (m) => errors.push(m.text()));
    await other.goto(blog.url.replace('localhost', '127.0.0.1'));
    await other.waitForTimeout(500);
    assert.equal(await other.locator('tally-reactions button').count(), 0);
    assert.ok(errors.some((e) => /CORS/.test(e)), errors.join('\n'));
  } finally {
    await context.close();
    blog.close();
    await cors.stop();
  }
});

// Live counts pushed by another client: needs GET /v1/live (runs once the document has it).
test('live: a click in one page shows in another without reloading', async (t) => {
  const doc = await (await fetch(`${tallyd.url}/v1/openapi.json`)).json();
  if (!doc.paths['/v1/live']) {
    t.skip('GET /v1/live is not in this build (enable: merge the live-counts branch)');
    return;
  }
  const watcher = await demo('watcher');
  const actor = await demo('actor');
  const start = Number(await countOf(watcher, 'post-3', 'like'));
  await button(actor, 'post-3', 'like').click();
  await watcher.waitForSelector(`tally-reactions[item="post-3"] button[data-kind="like"] .tally-count:text("${start + 1}")`, { timeout: 5000 });
  await watcher.context().close();
  await actor.context().close();
});
