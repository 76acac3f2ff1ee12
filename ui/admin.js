// admin.js — the operator's page (/ui/admin): figures from /metrics, hot items, trending, webhooks and
// recent changes from the admin endpoints, refreshed every REFRESH_MS. Admin rights: development mode
// (X-User-Id: admin) or a JWT whose role is admin, pasted here (kept for this tab only). Every value
// from the API is shown with textContent; the charts are plain SVG.
import { createClient, TallyError } from './tally.js';

const REFRESH_MS = 2000;
const HISTORY = 90; // points per chart (3 minutes)
const CHANGES_SHOWN = 12;
const CHANGES_PAGES_MAX = 20; // pages read to reach the end of the feed at start
const SVG = 'http://www.w3.org/2000/svg';
const $ = (id) => document.getElementById(id);

let client = null;
let previous = null; // the last metrics sample
const history = { rate: [], lag: [], batch: [] };
let changesAfter;
let changes = [];

/** Prometheus text → Map of "name{labels}" and of "name" (summed over labels) to numbers. */
export function parseMetrics(text) {
  const m = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!match) continue;
    const v = Number(match[3]);
    m.set(match[1] + (match[2] || ''), v);
    if (match[2]) m.set(match[1], (m.get(match[1]) || 0) + v);
  }
  return m;
}

function text(id, v) { $(id).textContent = v; }

function fmt(v, digits = 1) {
  if (v === undefined || v === null || !Number.isFinite(v)) return '–';
  return v >= 100 ? String(Math.round(v)) : v.toFixed(digits);
}

function push(series, v) {
  series.push(Number.isFinite(v) ? v : 0);
  if (series.length > HISTORY) series.shift();
}

/** Draws a sparkline of values into an <svg viewBox="0 0 240 60">. */
function chart(id, values) {
  const svg = $(id);
  const w = 240, h = 60, pad = 4;
  const max = Math.max(1e-9, ...values);
  const points = values.map((v, i) => {
    const x = values.length > 1 ? (i / (values.length - 1)) * w : 0;
    const y = h - pad - (v / max) * (h - 2 * pad);
    return `${x.toFixed(1)},${y.toFixed(1)}`;
  });
  const line = document.createElementNS(SVG, 'polyline');
  line.setAttribute('points', points.join(' '));
  line.setAttribute('class', 'line');
  const label = document.createElementNS(SVG, 'text');
  label.setAttribute('x', '2');
  label.setAttribute('y', '10');
  label.setAttribute('class', 'max');
  label.textContent = `max ${fmt(max, 2)}`;
  svg.replaceChildren(line, label);
}

function rows(tableId, list, cells) {
  const body = $(tableId).querySelector('tbody');
  body.replaceChildren(...list.map((x) => {
    const tr = document.createElement('tr');
    for (const c of cells(x)) {
      const td = document.createElement('td');
      td.textContent = c === undefined || c === null ? '' : String(c);
      tr.append(td);
    }
    return tr;
  }));
}

const show = (v) => (Array.isArray(v) ? v.join('+') || '∅' : v);

async function refreshMetrics() {
  const res = await client.request('GET', '/metrics', { text: true, retries: 0 });
  const m = parseMetrics(res.body);
  const now = performance.now();
  const sample = { at: now, writes: m.get('tally_writes_total') || 0, batchSum: m.get('tally_writer_batch_commands_sum') || 0,
    batchCount: m.get('tally_writer_batch_commands_count') || 0 };
  let rate = 0, batch = 0;
  if (previous) {
    const dt = (sample.at - previous.at) / 1000;
    rate = dt > 0 ? Math.max(0, sample.writes - previous.writes) / dt : 0;
    const dc = sample.batchCount - previous.batchCount;
    batch = dc > 0 ? (sample.batchSum - previous.batchSum) / dc : 0;
  } else if (sample.batchCount > 0) {
    batch = sample.batchSum / sample.batchCount;
  }
  previous = sample;
  const lag = m.get('tally_pipeline_lag_seconds') || 0;
  push(history.rate, rate);
  push(history.lag, lag);
  push(history.batch, batch);
  text('write-rate', fmt(rate));
  text('lag', fmt(lag, 3));
  text('batch', fmt(batch));
  text('queue', fmt(m.get('tally_writer_queue_depth'), 0));
  text('drift', fmt(m.get('tally_recount_drift') ?? 0, 0));
  text('failed', fmt(m.get('tally_writes_failed_total') ?? 0, 0));
  text('limited', fmt(m.get('tally_rate_limited_total') ?? 0, 0));
  text('replays', fmt(m.get('tally_idempotent_replays_total') ?? 0, 0));
  chart('chart-rate', history.rate);
  chart('chart-lag', history.lag);
  chart('chart-batch', history.batch);
}

async function refreshLists() {
  const hot = await client.request('GET', '/v1/admin/hot', { retries: 0 });
  rows('hot', hot.body.items, (x) => [x.item, fmt(x.rate)]);
  const t = await client.trending({ window: $('window').value, limit: 10 });
  rows('trending', t.items, (x) => [x.item, x.gain]);
}

async function refreshWebhooks() {
  try {
    const w = await client.request('GET', '/v1/admin/webhooks', { retries: 0 });
    const list = w.body.webhooks || w.body.items || [];
    rows('webhooks', list, (x) => [x.url, x.state, x.lag_s, x.last_error]);
    text('webhooks-note', list.length ? '' : 'no webhooks');
  } catch (err) {
    if (!(err instanceof TallyError) || err.status !== 404) throw err;
    rows('webhooks', [], () => []);
    text('webhooks-note', 'this server has no webhooks');
  }
}

// The change feed from its end: at start, page to the end (bounded), then only what is new.
async function refreshChanges() {
  for (let i = 0; i < CHANGES_PAGES_MAX; i++) {
    const q = changesAfter ? `?after=${changesAfter}&limit=1000` : '?limit=1000';
    const page = (await client.request('GET', `/v1/changes${q}`, { retries: 0 })).body;
    changes = changes.concat(page.changes).slice(-CHANGES_SHOWN);
    if (page.next) changesAfter = page.next;
    if (page.changes.length < 1000) break;
  }
  rows('changes', [...changes].reverse(), (c) => [c.at, c.item, c.user, show(c.from), show(c.to)]);
}

async function refresh() {
  try {
    await refreshMetrics();
    await refreshLists();
    await refreshWebhooks();
    await refreshChanges();
    text('error', '');
    text('updated', `updated ${new Date().toLocaleTimeString()}`);
    document.body.dataset.loaded = 'true';
  } catch (err) {
    let why = `could not refresh: ${err.message}`;
    if (err instanceof TallyError && (err.status === 401 || err.status === 403)) why = 'these figures need admin rights: paste an admin token';
    else if (err instanceof TallyError && err.status === 404 && adminListener) {
      why = 'the admin endpoints are served by the admin listener (--admin-listen): open /ui/admin there';
    }
    text('error', why);
  }
}

let adminListener = false;

async function start() {
  let dev = true;
  try {
    const doc = await (await fetch('/v1/openapi.json')).json();
    dev = !!doc['x-tally']?.['development-mode'];
    adminListener = !!doc['x-tally']?.['admin-listener'];
  } catch { /* keep the default */ }
  const connect = () => {
    const token = $('token').value.trim();
    sessionStorage.setItem('tally-admin-token', token);
    client = createClient(dev ? { baseUrl: location.origin, userId: 'admin' }
      : { baseUrl: location.origin, getToken: async () => token || null });
  };
  $('token-label').hidden = dev;
  $('token-use').hidden = dev;
  $('token').value = sessionStorage.getItem('tally-admin-token') || '';
  text('mode', dev ? 'development mode: admin as X-User-Id: admin' : '');
  $('auth').addEventListener('submit', (e) => { e.preventDefault(); connect(); refresh(); });
  $('window').addEventListener('change', () => refresh());
  connect();
  await refresh();
  setInterval(refresh, REFRESH_MS);
}

start();
