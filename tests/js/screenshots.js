// screenshots.js — the pictures of docs/images/ (README): the demo page's buttons and the operator's
// page under a little load. Not a test: `make build/tallyd && node tests/js/screenshots.js`.
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { startTallyd, REPO } from './helpers.js';
import { createClient } from '../../clients/js/tally.js';

const OUT = process.env.TALLY_SCREENSHOTS || join(REPO, 'docs', 'images');
const LOAD_MS = 9000;

const server = await startTallyd({ args: ['--rate-limit', 'off', '--hot-threshold', '5'] });
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox'] });
try {
  const seed = [['post-1', 'like', 12], ['post-1', 'dislike', 2], ['post-2', 'like', 5], ['post-3', 'dislike', 1]];
  for (const [item, kind, n] of seed) {
    for (let i = 0; i < n; i++) await createClient({ baseUrl: server.url, userId: `seed-${kind}-${i}` }).add(item, kind);
  }
  const page = await browser.newPage({ viewport: { width: 900, height: 600 } });
  await page.goto(`${server.url}/ui/?user=reader`);
  await page.waitForSelector('tally-reactions[item="post-1"] .tally-count:text("12")');
  await page.locator('tally-reactions[item="post-2"] button[data-kind="like"]').click();
  await page.waitForSelector('tally-reactions[item="post-2"]:not([busy])');
  await page.locator('main').screenshot({ path: join(OUT, 'button.png') });
  const admin = await browser.newPage({ viewport: { width: 1200, height: 860 } });
  await admin.goto(`${server.url}/ui/admin`);
  const end = Date.now() + LOAD_MS;
  let n = 0;
  while (Date.now() < end) { // a viral post-7 and a trickle elsewhere, in waves
    const burst = 20 + Math.round(15 * Math.sin(n / 40));
    await Promise.all(Array.from({ length: burst }, (_, i) => createClient({ baseUrl: server.url, userId: `fan-${n}-${i}` })
      .add(i % 5 ? 'post-7' : `post-${1 + (i % 4)}`, i % 7 ? 'like' : 'dislike')));
    n++;
    await new Promise((r) => setTimeout(r, 40));
  }
  await admin.waitForTimeout(2100);
  await admin.screenshot({ path: join(OUT, 'admin.png'), fullPage: true });
  console.log(`screenshots in ${OUT}`);
} finally {
  await browser.close();
  await server.stop();
}
