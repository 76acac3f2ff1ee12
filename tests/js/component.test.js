// component.test.js — <tally-reactions> in headless Chromium against the API's shapes (docs/api.md) for what this
// build does not serve yet: many mode (arrays `reactions`, `reactors`) and live counts over
// GET /v1/live (server-sent events). The page and its scripts come from a real tallyd; the API
// answers are played by the test (playwright's page.route), as the contract writes them.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';
import { startTallyd, tallydHasFlag } from './helpers.js';

let tallyd, browser;

before(async () => {
  tallyd = await startTallyd({ args: ['--reactions', 'like,love'] });
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox'] });
});

after(async () => {
  await browser?.close();
  await tallyd?.stop();
});

const json = (body) => ({ status: 200, contentType: 'application/json', body: JSON.stringify(body) });
const sse = (events, retryMs) => ({
  status: 200,
  contentType: 'text/event-stream',
  body: `retry: ${retryMs}\n\n${events.map(([id, data]) => `id: ${id}\nevent: counts\ndata: ${JSON.stringify(data)}\n\n`).join('')}`,
});

/** The demo page with the API played by api(route, request) (null: let tallyd answer). */
async function page(api) {
  const context = await browser.newContext();
  const p = await context.newPage();
  p.problems = [];
  p.on('pageerror', (e) => p.problems.push(e.message));
  await p.route((url) => url.pathname.startsWith('/v1/items') || url.pathname === '/v1/live' || url.pathname === '/v1/viewer', async (route) => {
    const answer = await api(route.request());
    if (answer) await route.fulfill(answer);
    else await route.continue();
  });
  await p.goto(`${tallyd.url}/ui/?user=viewer`);
  return p;
}

const btn = (p, item, kind) => p.locator(`tally-reactions[item="${item}"] button[data-kind="${kind}"]`);
const count = async (p, item, kind) => (await btn(p, item, kind).locator('.tally-count').textContent()).trim();

test('many mode: a set of kinds, each button adds or removes its own kind', async () => {
  const writes = [];
  let viewer = { reactions: ['like'], version: 2 };
  const p = await page(async (req) => {
    const url = new URL(req.url());
    if (url.pathname === '/v1/live') return { status: 503, headers: { 'retry-after': '30' }, body: '' };
    if (req.method() === 'GET' && url.pathname === '/v1/items') {
      const ids = url.searchParams.get('ids').split(',');
      return json({ items: ids.map((id) => ({ item: id, counts: { like: 3, love: 1 }, reactors: 4, viewer })) });
    }
    if (req.method() !== 'GET') {
      writes.push(`${req.method()} ${url.pathname}`);
      const kind = url.pathname.split('/').pop();
      const previous = viewer.reactions;
      const set = new Set(previous);
      if (req.method() === 'PUT') set.add(kind); else set.delete(kind);
      viewer = { reactions: ['like', 'love'].filter((k) => set.has(k)), version: viewer.version + 1 };
      return json({ item: 'post-1', reactions: viewer.reactions, previous, version: viewer.version, changed: true, cursor: '30' });
    }
    return null;
  });
  await p.waitForSelector('tally-reactions[item="post-1"] button[data-kind="like"][aria-pressed="true"]');
  assert.equal(await btn(p, 'post-1', 'love').getAttribute('aria-pressed'), 'false');
  await btn(p, 'post-1', 'love').click();
  await p.waitForSelector('tally-reactions[item="post-1"]:not([busy]) button[data-kind="love"][aria-pressed="true"]');
  assert.equal(await btn(p, 'post-1', 'like').getAttribute('aria-pressed'), 'true'); // both held
  assert.deepEqual([await count(p, 'post-1', 'like'), await count(p, 'post-1', 'love')], ['3', '2']);
  await btn(p, 'post-1', 'like').click();
  await p.waitForSelector('tally-reactions[item="post-1"]:not([busy]) button[data-kind="like"][aria-pressed="false"]');
  assert.equal(await btn(p, 'post-1', 'love').getAttribute('aria-pressed'), 'true');
  assert.deepEqual([await count(p, 'post-1', 'like'), await count(p, 'post-1', 'love')], ['2', '2']);
  assert.deepEqual(writes, ['PUT /v1/items/post-1/love', 'DELETE /v1/items/post-1/like']);
  assert.deepEqual(p.problems, []);
  await p.context().close();
});

test('a count pushed before the first read is shown, and the buttons are offered only once that read is in', async () => {
  let release;
  const held = new Promise((resolve) => { release = resolve; });
  const writes = [];
  const p = await page(async (req) => {
    const url = new URL(req.url());
    if (url.pathname === '/v1/live') return sse([['10', { item: 'post-1', counts: { like: 7, love: 0 } }]], 60000);
    if (req.method() === 'GET' && url.pathname === '/v1/items') {
      await held; // the first read arrives after the stream's counts
      const ids = url.searchParams.get('ids').split(',');
      return json({ items: ids.map((id) => ({ item: id, counts: { like: 7, love: 0 }, viewer: { reaction: 'none', version: 0 } })) });
    }
    if (req.method() === 'PUT') {
      writes.push(url.pathname);
      return json({ item: 'post-1', reaction: 'like', previous: 'none', version: 1, changed: true, cursor: '20' });
    }
    return null;
  });
  await p.waitForSelector('tally-reactions[item="post-1"] button[data-kind="like"] .tally-count:text("7")');
  assert.equal(await btn(p, 'post-1', 'like').isDisabled(), true, 'offered before the viewer\'s state is known');
  release();
  await btn(p, 'post-1', 'like').click(); // waits until the button is enabled
  await p.waitForSelector('tally-reactions[item="post-1"]:not([busy]) button[data-kind="like"][aria-pressed="true"]');
  assert.equal(await count(p, 'post-1', 'like'), '8');
  assert.deepEqual(writes, ['/v1/items/post-1/like']);
  assert.deepEqual(p.problems, []);
  await p.context().close();
});

test('a click shows the counts of the write\'s answer (others\' writes before it included), null when hidden', async () => {
  let answer = { item: 'post-1', reaction: 'like', previous: 'none', version: 1, changed: true, cursor: '20', counts: { like: 12, love: 3 } };
  const p = await page(async (req) => {
    const url = new URL(req.url());
    if (url.pathname === '/v1/live') return sse([], 60000);
    if (req.method() === 'GET' && url.pathname === '/v1/items') {
      const ids = url.searchParams.get('ids').split(',');
      const policy = { kinds: ['like', 'love'], closed: false, counts: 'public' };
      return json({ items: ids.map((id) => ({ item: id, counts: { like: 7, love: 0 }, policy, viewer: { reaction: 'none', version: 0 } })) });
    }
    if (req.method() === 'PUT' || req.method() === 'DELETE') return json(answer);
    return null;
  });
  await p.waitForSelector('tally-reactions[item="post-1"] button[data-kind="like"] .tally-count:text("7")');
  await btn(p, 'post-1', 'like').click();
  await p.waitForSelector('tally-reactions[item="post-1"]:not([busy]) button[data-kind="like"][aria-pressed="true"]');
  assert.equal(await count(p, 'post-1', 'like'), '12', 'the answer\'s counts, not the guess (8)');
  assert.equal(await count(p, 'post-1', 'love'), '3');
  answer = { item: 'post-1', reaction: 'none', previous: 'like', version: 2, changed: true, cursor: '21', counts: null };
  await btn(p, 'post-1', 'like').click();
  await p.waitForSelector('tally-reactions[item="post-1"]:not([busy]) button[data-kind="like"][aria-pressed="false"]');
  assert.equal(await count(p, 'post-1', 'like'), '', 'hidden counts are not drawn');
  assert.deepEqual(p.problems, []);
  await p.context().close();
});

test('live: one stream for the page; pushed counts shown, except those older than our own write', async () => {
  const streams = [];
  let phase = 0; // what the next stream says
  const p = await page(async (req) => {
    const url = new URL(req.url());
    if (url.pathname === '/v1/live') {
      streams.push(url.searchParams.get('ids'));
      if (phase === 0) return sse([['10', { item: 'post-1', counts: { like: 7, love: 0 } }], ['10', { item: 'post-2', counts: { like: 1, love: 5 } }]], 300);
      if (phase === 1) return sse([['15', { item: 'post-1', counts: { like: 7, love: 0 } }]], 300); // before our click
      phase = 3;
      return sse([['21', { item: 'post-1', counts: { like: 9, love: 0 } }]], 60000);
    }
    if (req.method() === 'GET' && url.pathname === '/v1/items') {
      const ids = url.searchParams.get('ids').split(',');
      return json({ items: ids.map((id) => ({ item: id, counts: { like: 0, love: 0 }, viewer: { reaction: 'none', version: 0 } })) });
    }
    if (req.method() === 'PUT') {
      return json({ item: 'post-1', reaction: 'like', previous: 'none', version: 1, changed: true, cursor: '20' });
    }
    return null;
  });
  await p.waitForSelector('tally-reactions[item="post-1"] button[data-kind="like"] .tally-count:text("7")');
  assert.equal(await count(p, 'post-2', 'love'), '5');
  assert.equal(streams.at(-1), 'post-1,post-2,post-3'); // one stream for every button of the page
  phase = 1;
  await btn(p, 'post-1', 'like').click();
  await p.waitForSelector('tally-reactions[item="post-1"]:not([busy]) button[data-kind="like"][aria-pressed="true"]');
  assert.equal(await count(p, 'post-1', 'like'), '8');
  const before = streams.length;
  for (let i = 0; i < 100 && streams.length < before + 1; i++) await p.waitForTimeout(20);
  await p.waitForTimeout(100);
  assert.equal(await count(p, 'post-1', 'like'), '8', 'a count older than our write would undo the click');
  phase = 2;
  await p.waitForSelector('tally-reactions[item="post-1"] button[data-kind="like"] .tally-count:text("9")', { timeout: 5000 });
  assert.ok(new Set(streams).size === 1, `streams: ${streams}`);
  assert.deepEqual(p.problems, []);
  await p.context().close();
});

// The same against a real tallyd in many mode: runs once tallyd has --reaction-mode.
test('many mode against a real tallyd: two kinds held at once, survives a reload', async (t) => {
  if (!tallydHasFlag('--reaction-mode')) {
    t.skip('tallyd has no --reaction-mode in this build (enable: merge the many-mode branch)');
    return;
  }
  const many = await startTallyd({ args: ['--reaction-mode', 'many', '--reactions', 'like,love'] });
  const context = await browser.newContext();
  try {
    const p = await context.newPage();
    await p.goto(`${many.url}/ui/?user=setter`);
    await p.waitForSelector('tally-reactions[item="post-1"] button[data-kind="love"] .tally-count:text("0")');
    await btn(p, 'post-1', 'like').click();
    await p.waitForSelector('tally-reactions[item="post-1"]:not([busy]) button[data-kind="like"][aria-pressed="true"]');
    await btn(p, 'post-1', 'love').click();
    await p.waitForSelector('tally-reactions[item="post-1"]:not([busy]) button[data-kind="love"][aria-pressed="true"]');
    assert.equal(await btn(p, 'post-1', 'like').getAttribute('aria-pressed'), 'true');
    await p.reload();
    await p.waitForSelector('tally-reactions[item="post-1"] button[data-kind="love"][aria-pressed="true"]');
    assert.equal(await btn(p, 'post-1', 'like').getAttribute('aria-pressed'), 'true');
    assert.deepEqual([await count(p, 'post-1', 'like'), await count(p, 'post-1', 'love')], ['1', '1']);
    await btn(p, 'post-1', 'like').click();
    await p.waitForSelector('tally-reactions[item="post-1"]:not([busy]) button[data-kind="like"][aria-pressed="false"]');
    const item = await (await fetch(`${many.url}/v1/items/post-1`, { headers: { 'X-User-Id': 'setter' } })).json();
    assert.deepEqual(item.viewer.reactions, ['love']);
    assert.equal(item.reactors, 1);
  } finally {
    await context.close();
    await many.stop();
  }
});

test('a first read that fails is shown, and tried again', async () => {
  let reads = 0;
  const p = await page(async (req) => {
    const url = new URL(req.url());
    if (url.pathname === '/v1/live') return { status: 503, headers: { 'retry-after': '30' }, body: '' };
    if (req.method() === 'GET' && url.pathname === '/v1/items') {
      if (++reads <= 2) { // the first page load and the one after configure(): both refused
        return { status: 400, contentType: 'application/problem+json', body: '{"type":"urn:tally:error:invalid-parameter","title":"x","status":400}' };
      }
      const ids = url.searchParams.get('ids').split(',');
      return json({ items: ids.map((id) => ({ item: id, counts: { like: 4, love: 0 }, viewer: { reaction: 'none', version: 0 } })) });
    }
    return null;
  });
  await p.waitForSelector('tally-reactions[item="post-1"][error="invalid-parameter"]');
  await p.waitForSelector('tally-reactions[item="post-1"] button[data-kind="like"] .tally-count:text("4")', { timeout: 8000 });
  assert.equal(await p.locator('tally-reactions[item="post-1"]').getAttribute('error'), null);
  await p.context().close();
});

test('item policies against a real tallyd: a disallowed kind is not offered, a closed item disabled with a reason announced', async () => {
  const admin = { 'X-User-Id': 'admin', 'Content-Type': 'application/json' };
  const put = (target, body) => fetch(`${tallyd.url}/v1/admin/policies/${target}`, { method: 'PUT', headers: admin, body: JSON.stringify(body) });
  assert.equal((await put('post-1', { kinds: ['like'] })).status, 200);
  assert.equal((await put('post-2', { closed: true, counts: 'hidden' })).status, 200);
  const context = await browser.newContext();
  try {
    const p = await context.newPage();
    await p.goto(`${tallyd.url}/ui/?user=viewer`);
    await p.waitForSelector('tally-reactions[item="post-1"] button[data-kind="like"]:not([disabled])');
    assert.equal(await btn(p, 'post-1', 'love').count(), 0, 'a kind the policy does not allow is not offered');
    // closed (and hidden): the buttons are there, disabled, described by a status that says why
    await p.waitForSelector('tally-reactions[item="post-2"][closed] button[data-kind="like"][disabled]');
    const el = p.locator('tally-reactions[item="post-2"]');
    const status = el.locator('[role="status"]');
    assert.match(await status.textContent(), /closed/);
    assert.equal(await status.getAttribute('aria-live'), 'polite');
    assert.equal(await btn(p, 'post-2', 'like').getAttribute('aria-describedby'), await status.getAttribute('id'));
    assert.equal(await count(p, 'post-2', 'like'), '', 'hidden counts are not shown');
    // reopened: a new page offers the buttons again
    assert.equal((await put('post-2', {})).status, 200);
    await p.reload();
    await p.waitForSelector('tally-reactions[item="post-2"]:not([closed]) button[data-kind="like"]:not([disabled])');
    assert.equal(await btn(p, 'post-2', 'love').count(), 1);
  } finally {
    await context.close();
    await fetch(`${tallyd.url}/v1/admin/policies/post-1`, { method: 'DELETE', headers: admin });
    await fetch(`${tallyd.url}/v1/admin/policies/post-2`, { method: 'DELETE', headers: admin });
  }
});

test('split-reads: the element\'s counts from the public read (no user sent), its viewer\'s part from GET /v1/viewer', async () => {
  const reads = [];
  const p = await page(async (req) => {
    const url = new URL(req.url());
    const user = req.headers()['x-user-id'] || null;
    if (url.pathname === '/v1/live') return { status: 503, headers: { 'retry-after': '30' }, body: '' };
    if (req.method() === 'GET' && url.pathname === '/v1/items') {
      const ids = url.searchParams.get('ids').split(',');
      reads.push({ path: url.pathname, ids: ids.join(','), user });
      const viewer = user ? { viewer: { reaction: 'none', version: 0 } } : {};
      return json({ items: ids.map((id) => ({ item: id, counts: { like: id === 'split-1' ? 41 : 0, love: 2 }, ...viewer })) });
    }
    if (req.method() === 'GET' && url.pathname === '/v1/viewer') {
      const ids = url.searchParams.get('ids').split(',');
      reads.push({ path: url.pathname, ids: ids.join(','), user });
      return json({ items: ids.map((id) => ({ item: id, reaction: 'like', version: 4 })) });
    }
    return null;
  });
  await p.waitForSelector('tally-reactions[item="post-1"] button[data-kind="like"]:not([disabled])');
  await p.evaluate(() => {
    const el = document.createElement('tally-reactions');
    el.setAttribute('item', 'split-1');
    el.setAttribute('split-reads', '');
    document.body.append(el);
  });
  await p.waitForSelector('tally-reactions[item="split-1"] button[data-kind="like"][aria-pressed="true"]:not([disabled])');
  assert.equal(await count(p, 'split-1', 'like'), '41');
  assert.equal(await count(p, 'split-1', 'love'), '2');
  const split = reads.filter((r) => r.ids === 'split-1');
  assert.deepEqual(split.sort((a, b) => a.path.localeCompare(b.path)), [
    { path: '/v1/items', ids: 'split-1', user: null },
    { path: '/v1/viewer', ids: 'split-1', user: 'viewer' },
  ]);
  // the page's other elements are read as before: one read with the user
  assert.ok(reads.some((r) => r.path === '/v1/items' && r.ids.includes('post-1') && r.user === 'viewer'), JSON.stringify(reads));
  assert.ok(!reads.some((r) => r.path === '/v1/viewer' && r.ids.includes('post-1')));
  assert.deepEqual(p.problems, []);
  await p.context().close();
});
