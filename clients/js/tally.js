// tally.js — a client for tally's HTTP API (docs/api.md), for browsers and Node 20. No dependencies.
//
// Ids go into paths and ids= raw: tally's id alphabet (A-Z a-z 0-9 . _ : ~ -) needs no encoding and
// tally refuses percent-encoding, so encodeURIComponent (which would encode ':') is never used; an id
// outside the alphabet is refused here, before any request.
// Writes carry an Idempotency-Key made per call and reused on each of its retries, so a retry after a
// lost answer is never applied twice. 503 and 429 are retried after Retry-After, within a bound.

const ID_RE = /^[A-Za-z0-9._:~-]{1,128}$/;
const LIVE_IDS_MAX = 100; // one stream serves up to 100 items
const DEFAULT_RETRIES = 3;
const DEFAULT_MAX_DELAY_MS = 10000;
const BACKOFF_BASE_MS = 250;
const LIVE_RETRY_MIN_MS = 1000;
const LIVE_RETRY_MAX_MS = 30000;

/** An answer that is not 2xx, or a request that never got one. `code` is the problem's stable code. */
export class TallyError extends Error {
  constructor(status, code, detail, problem = null, retryAfterS = null) {
    super(`${status || 'network'} ${code}${detail ? `: ${detail}` : ''}`);
    this.name = 'TallyError';
    this.status = status; // 0 when no answer came
    this.code = code; // "version-mismatch", "rate-limited", … ("network" when no answer)
    this.detail = detail;
    this.problem = problem; // the whole RFC 9457 body (a 412 carries reaction(s) and version)
    this.retryAfterS = retryAfterS;
  }
}

/** Whether id is a valid tally id (item or user). */
export function isValidId(id) {
  return typeof id === 'string' && ID_RE.test(id) && id !== '.' && id !== '..';
}

function checkId(id, what = 'item') {
  if (!isValidId(id)) throw new TypeError(`invalid ${what} id: ${JSON.stringify(id)} (1-128 of A-Z a-z 0-9 . _ : ~ -)`);
  return id;
}

// Web Crypto: a global in browsers and Node 19 and later; Node 18 (Debian 12's) has it only as
// node:crypto's webcrypto, loaded here once. Browsers never take the import.
const webCrypto =
  globalThis.crypto ??
  (globalThis.process?.versions?.node ? (await import('node:crypto')).webcrypto : undefined);

/** A fresh Idempotency-Key: crypto.randomUUID where the context has it, else 128 random bits. */
export function newIdempotencyKey() {
  const c = webCrypto;
  if (c && typeof c.randomUUID === 'function') return c.randomUUID();
  if (!c || typeof c.getRandomValues !== 'function') throw new Error('tally: no Web Crypto (crypto.getRandomValues) here');
  const b = c.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

const sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener?.('abort', () => { clearTimeout(t); reject(signal.reason); }, { once: true });
  });

function retryAfterMs(response) {
  const v = response?.headers?.get('retry-after');
  if (v == null) return null;
  const s = Number(v);
  if (Number.isFinite(s) && s >= 0) return s * 1000;
  const at = Date.parse(v);
  return Number.isFinite(at) ? Math.max(0, at - Date.now()) : null;
}

/** Compares two change-feed cursors: <0, 0, >0; null when they cannot be compared (opaque, not numeric). */
export function compareCursors(a, b) {
  if (typeof a !== 'string' || typeof b !== 'string' || !/^\d+$/.test(a) || !/^\d+$/.test(b)) return null;
  const x = BigInt(a), y = BigInt(b);
  return x < y ? -1 : x > y ? 1 : 0;
}

/**
 * Folds one change-feed entry (GET /v1/changes, or a webhook's transition) into counts, an object
 * {kind: n} (and `reactors` in many mode), in place; returns counts. An entry may carry
 * counted: [before, after] (absent: [true, true]): minus `from` if the row counted before, plus `to`
 * if it counts after. A void or restore of a user is an entry with from equal to to that moves the
 * counts by the counted flags alone; a voided user's own writes ([false, false]) move nothing. Folding
 * every entry of the feed in order gives exactly the counts tally holds. `from`/`to` are a kind or
 * "none" (one mode) or arrays of kinds (many mode).
 */
export function foldChange(counts, entry) {
  const [before, after] = Array.isArray(entry.counted) ? entry.counted : [true, true];
  const kinds = (v) => (Array.isArray(v) ? v : v === 'none' || v == null ? [] : [v]);
  const many = Array.isArray(entry.from) || Array.isArray(entry.to);
  const apply = (set, by) => {
    for (const k of set) counts[k] = (counts[k] ?? 0) + by;
    if (many && set.length) counts.reactors = (counts.reactors ?? 0) + by;
  };
  if (before) apply(kinds(entry.from), -1);
  if (after) apply(kinds(entry.to), +1);
  return counts;
}

function query(params) {
  const parts = [];
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null) continue;
    parts.push(`${k}=${Array.isArray(v) ? v.join(',') : v}`);
  }
  return parts.length ? `?${parts.join('&')}` : '';
}

/**
 * Creates a client.
 * options: baseUrl ("" = this page's origin), getToken (async () => JWT or null), userId (development
 * mode: sent as X-User-Id), retries (503/429/network retries, default 3), maxRetryDelayMs (default 10 s),
 * fetch (default globalThis.fetch), splitReads (item and items read the counts without the user, a
 * public answer a CDN or the browser may cache, and the viewer's part from GET /v1/viewer).
 */
export function createClient(options = {}) {
  return new TallyClient(options);
}

export class TallyClient {
  constructor({ baseUrl = '', getToken = null, userId = null, retries = DEFAULT_RETRIES,
    maxRetryDelayMs = DEFAULT_MAX_DELAY_MS, fetch: fetchFn = null, splitReads = false } = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, '');
    this.getToken = getToken;
    this.userId = userId;
    this.retries = retries;
    this.maxRetryDelayMs = maxRetryDelayMs;
    this.fetch = fetchFn || ((...a) => globalThis.fetch(...a));
    this.splitReads = !!splitReads;
    this._live = null;
  }

  // anonymous: no Authorization and no X-User-Id, so that the answer is the public one every reader
  // shares (and a cache may keep).
  async _headers(extra, anonymous = false) {
    const h = { Accept: 'application/json', ...extra };
    if (anonymous) return h;
    const token = this.getToken ? await this.getToken() : null;
    if (token) h.Authorization = `Bearer ${token}`;
    const user = typeof this.userId === 'function' ? this.userId() : this.userId;
    if (user) h['X-User-Id'] = user;
    return h;
  }

  /**
   * One request with the retries: 503, 429 and network errors are retried after Retry-After (or a
   * growing backoff), at most `retries` times and never waiting longer than maxRetryDelayMs at once.
   * The headers (so the Idempotency-Key) are the same on every attempt. Returns {status, body, headers}.
   */
  async request(method, path, { body, headers = {}, signal, retries = this.retries, text = false, anonymous = false } = {}) {
    const init = { method, headers: await this._headers(headers, anonymous), signal };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers['Content-Type'] = 'application/json';
    }
    for (let attempt = 0; ; attempt++) {
      let response;
      try {
        response = await this.fetch(this.baseUrl + path, init);
      } catch (err) {
        if (signal?.aborted) throw err;
        if (attempt >= retries) throw new TallyError(0, 'network', String(err?.message || err));
        await sleep(Math.min(BACKOFF_BASE_MS * 2 ** attempt, this.maxRetryDelayMs), signal);
        continue;
      }
      if ((response.status === 503 || response.status === 429) && attempt < retries) {
        const wait = retryAfterMs(response) ?? BACKOFF_BASE_MS * 2 ** attempt;
        await response.arrayBuffer().catch(() => {});
        await sleep(Math.min(wait, this.maxRetryDelayMs), signal);
        continue;
      }
      const type = response.headers.get('content-type') || '';
      const payload = text ? await response.text() : type.includes('json') ? await response.json() : await response.text();
      if (response.ok) return { status: response.status, body: payload, headers: response.headers };
      const p = typeof payload === 'object' && payload ? payload : {};
      const code = typeof p.type === 'string' ? p.type.split(':').pop() : `http-${response.status}`;
      const ra = retryAfterMs(response);
      throw new TallyError(response.status, code, p.detail || '', p, ra == null ? null : ra / 1000);
    }
  }

  // --- reads ---

  /**
   * GET /v1/items/{item}: {item, counts, policy?, viewer?} (viewer when a user is known). policy, when
   * one applies: {kinds, closed, counts: 'public'|'hidden', max_kinds?}: offer only its kinds, none when
   * closed; counts (and reactors) are null while hidden. Writes it refuses fail with a TallyError
   * whose code is item-closed, reaction-not-allowed (problem.allowed) or too-many-reactions.
   */
  async item(item, { split = this.splitReads } = {}) {
    if (split) return (await this._splitRead([checkId(item)], `/v1/items/${item}`, (b) => [b]))[0];
    return (await this.request('GET', `/v1/items/${checkId(item)}`)).body;
  }

  /**
   * GET /v1/items?ids=…: the item objects in request order (at most 100). split (default: the
   * client's splitReads): the counts from the public read, the viewer's part from GET /v1/viewer.
   */
  async items(ids, { split = this.splitReads } = {}) {
    ids.forEach((id) => checkId(id));
    if (ids.length === 0) return [];
    if (split) return this._splitRead(ids, `/v1/items${query({ ids })}`, (b) => b.items);
    return (await this.request('GET', `/v1/items${query({ ids })}`)).body.items;
  }

  /** Whether a user goes with the requests (a token, or a development-mode user id). */
  async _hasUser() {
    const user = typeof this.userId === 'function' ? this.userId() : this.userId;
    if (user) return true;
    return !!(this.getToken && (await this.getToken()));
  }

  // The counts asked without the user (the same answer for every reader: a cache in front serves it),
  // and, when a user is known, their own part with one GET /v1/viewer beside it, put back together
  // into the item objects a read with the user would give. The two are read apart: counts from a
  // cache may be up to its max-age old, the viewer's part never is.
  async _splitRead(ids, publicPath, itemsOf) {
    const [pub, mine] = await Promise.all([
      this.request('GET', publicPath, { anonymous: true }),
      this._hasUser().then((known) => (known ? this.request('GET', `/v1/viewer${query({ ids })}`) : null)),
    ]);
    const items = itemsOf(pub.body);
    if (!mine) return items;
    return items.map((obj, i) => {
      const { item, ...viewer } = mine.body.items[i] || {};
      return item === obj.item ? { ...obj, viewer } : obj;
    });
  }

  /** GET /v1/items/{item}/reaction: {item, reaction (or reactions), version}. */
  async reaction(item) {
    return (await this.request('GET', `/v1/items/${checkId(item)}/reaction`)).body;
  }

  /** GET /v1/trending: {window, reaction, items:[{item, gain}]}. */
  async trending({ reaction, window, limit } = {}) {
    return (await this.request('GET', `/v1/trending${query({ reaction, window, limit })}`)).body;
  }

  /** GET /v1/items/{item}/reactions: who reacted, newest first; pass the answer's next as after. */
  async whoReacted(item, { reaction, limit, after } = {}) {
    return (await this.request('GET', `/v1/items/${checkId(item)}/reactions${query({ reaction, limit, after })}`)).body;
  }

  /** GET /v1/users/{user}/reactions: the items a user reacted to, newest first. */
  async userReactions(user, { reaction, limit, after } = {}) {
    return (await this.request('GET', `/v1/users/${checkId(user, 'user')}/reactions${query({ reaction, limit, after })}`)).body;
  }

  /** Every item of a list, following next (at most maxPages pages). */
  async *pages(fetchPage, { maxPages = 100 } = {}) {
    let after;
    for (let i = 0; i < maxPages; i++) {
      const page = await fetchPage(after);
      yield page;
      if (!page.next) return;
      after = page.next;
    }
  }

  // --- writes: {item, reaction (or reactions), previous, version, changed, cursor?, counts, reactors?} ---
  // counts: the item's counts exactly as folding the change feed up to the answer's cursor gives
  // (this write included), null while the item's policy hides them; show them at once after a click.

  async _write(method, path, body, { ifMatch, idempotencyKey, signal } = {}) {
    const headers = { 'Idempotency-Key': idempotencyKey || newIdempotencyKey() };
    if (ifMatch !== undefined && ifMatch !== null) headers['If-Match'] = `"${ifMatch}"`;
    return (await this.request(method, path, { body, headers, signal })).body;
  }

  /** Sets the user's reaction: a kind or "none"; in many mode an array sets the whole set. */
  async set(item, reaction, opts) {
    const body = Array.isArray(reaction) ? { reactions: reaction } : { reaction };
    return this._write('PUT', `/v1/items/${checkId(item)}/reaction`, body, opts);
  }

  /** Clears the user's reaction (or whole set). */
  async clear(item, opts) {
    return this._write('DELETE', `/v1/items/${checkId(item)}/reaction`, undefined, opts);
  }

  /** PUT /v1/items/{item}/{kind}: sets that kind (one mode) or adds it (many mode). */
  async add(item, kind, opts) {
    return this._write('PUT', `/v1/items/${checkId(item)}/${checkKind(kind)}`, undefined, opts);
  }

  /** DELETE /v1/items/{item}/{kind}: clears it if it is the user's reaction (one mode) or removes it (many). */
  async remove(item, kind, opts) {
    return this._write('DELETE', `/v1/items/${checkId(item)}/${checkKind(kind)}`, undefined, opts);
  }

  /** POST …/reaction:toggle. Prefer set/add/remove from a UI: they say the state wanted. */
  async toggle(item, kind, opts) {
    return this._write('POST', `/v1/items/${checkId(item)}/reaction:toggle`, { reaction: checkKind(kind) }, opts);
  }

  // --- live counts ---

  /**
   * Live counts of items: onCounts({item, counts, reactors?, policy?, cursor}) for each event (counts
   * null while the item's policy hides them; every item is sent again when a policy changes). One stream for
   * every subscription of this client (up to 100 items a stream), reopened when the set changes and
   * after errors (after Retry-After). Returns an unsubscribe function.
   */
  subscribe(item, onCounts) {
    checkId(item);
    if (!this._live) this._live = new LiveCounts(this);
    return this._live.subscribe(item, onCounts);
  }

  /** Closes every live stream of this client. */
  closeLive() {
    this._live?.close();
    this._live = null;
  }
}

function checkKind(kind) {
  if (typeof kind !== 'string' || !/^[a-z0-9_]{1,32}$/.test(kind)) throw new TypeError(`invalid kind: ${JSON.stringify(kind)}`);
  return kind;
}

/** Parses a text/event-stream (the HTML standard's rules) from chunks; onEvent({event, data, id}). */
export class EventStreamParser {
  constructor(onEvent, onRetry = () => {}) {
    this.onEvent = onEvent;
    this.onRetry = onRetry;
    this.buf = '';
    this.data = [];
    this.event = '';
    this.lastId = '';
  }

  push(text) {
    this.buf += text;
    let nl;
    while ((nl = this.buf.search(/\r\n|\r|\n/)) >= 0) {
      if (this.buf[nl] === '\r' && nl + 1 === this.buf.length) break; // a \r\n may be split
      const line = this.buf.slice(0, nl);
      this.buf = this.buf.slice(nl + (this.buf.startsWith('\r\n', nl) ? 2 : 1));
      this.line(line);
    }
  }

  line(line) {
    if (line === '') {
      if (this.data.length) this.onEvent({ event: this.event || 'message', data: this.data.join('\n'), id: this.lastId });
      this.data = [];
      this.event = '';
      return;
    }
    if (line.startsWith(':')) return; // a comment: keep-alive
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.event = value;
    else if (field === 'id' && !value.includes('\0')) this.lastId = value;
    else if (field === 'retry' && /^\d+$/.test(value)) this.onRetry(Number(value));
  }
}

/** The page's live streams: GET /v1/live?ids=… for the union of the subscribed items. */
class LiveCounts {
  constructor(client) {
    this.client = client;
    this.subs = new Map(); // item -> Set of callbacks
    this.streams = [];
    this.reopenQueued = false;
    this.closed = false;
  }

  subscribe(item, cb) {
    let set = this.subs.get(item);
    if (!set) {
      set = new Set();
      this.subs.set(item, set);
      this.queueReopen();
    }
    set.add(cb);
    return () => {
      set.delete(cb);
      if (set.size === 0) {
        this.subs.delete(item);
        this.queueReopen();
      }
    };
  }

  // Subscriptions made in one go (every button of a page) open one stream, not one each.
  queueReopen() {
    if (this.reopenQueued || this.closed) return;
    this.reopenQueued = true;
    queueMicrotask(() => {
      this.reopenQueued = false;
      this.reopen();
    });
  }

  reopen() {
    this.streams.forEach((s) => s.close());
    this.streams = [];
    const ids = [...this.subs.keys()];
    for (let i = 0; i < ids.length; i += LIVE_IDS_MAX) {
      this.streams.push(new LiveStream(this, ids.slice(i, i + LIVE_IDS_MAX)));
    }
  }

  dispatch(msg) {
    for (const cb of this.subs.get(msg.item) || []) {
      try { cb(msg); } catch (err) { console.error(err); }
    }
  }

  close() {
    this.closed = true;
    this.streams.forEach((s) => s.close());
    this.streams = [];
  }
}

/** One stream, reconnecting by itself: EventSource in browsers, fetch streaming where there is none. */
class LiveStream {
  constructor(hub, ids) {
    this.hub = hub;
    this.url = `${hub.client.baseUrl}/v1/live${query({ ids })}`;
    this.closed = false;
    this.failures = 0;
    this.retryMs = LIVE_RETRY_MIN_MS;
    this.open();
  }

  onEvent({ event, data, id }) {
    if (event !== 'counts') return;
    this.failures = 0;
    let msg;
    try { msg = JSON.parse(data); } catch { return; }
    if (msg && typeof msg.item === 'string') this.hub.dispatch({ ...msg, cursor: id || null });
  }

  // After an error or a non-200 (EventSource gives up on those): wait, then a new stream (which
  // starts with the current counts again).
  again(waitMs) {
    if (this.closed) return;
    this.failures++;
    const backoff = Math.min(this.retryMs * 2 ** Math.min(this.failures - 1, 5), LIVE_RETRY_MAX_MS);
    const wait = waitMs ?? backoff;
    this.timer = setTimeout(() => this.open(), Math.max(wait, LIVE_RETRY_MIN_MS));
  }

  open() {
    if (this.closed) return;
    if (typeof globalThis.EventSource === 'function' && !this.hub.client.forceFetchStream) this.openEventSource();
    else this.openFetch();
  }

  openEventSource() {
    const es = new EventSource(this.url);
    this.es = es;
    es.addEventListener('counts', (e) => this.onEvent({ event: 'counts', data: e.data, id: e.lastEventId }));
    es.onerror = () => {
      // A network error: EventSource retries by itself (readyState CONNECTING). A non-200 (503 with
      // Retry-After, which EventSource cannot read): it has given up (CLOSED), so start over.
      if (es.readyState === 2 && !this.closed) {
        es.close();
        this.again();
      }
    };
  }

  async openFetch() {
    const ctl = new AbortController();
    this.ctl = ctl;
    let waitMs = null;
    try {
      const res = await this.hub.client.fetch(this.url, { headers: { Accept: 'text/event-stream' }, signal: ctl.signal });
      if (res.status !== 200 || !res.body) {
        waitMs = retryAfterMs(res);
        await res.arrayBuffer().catch(() => {});
      } else {
        const parser = new EventStreamParser((e) => this.onEvent(e), (ms) => { this.retryMs = ms; });
        const decoder = new TextDecoder();
        for await (const chunk of res.body) parser.push(decoder.decode(chunk, { stream: true }));
        this.failures = 0; // a clean end (the server shut down): reconnect after its retry: value
        waitMs = this.retryMs;
      }
    } catch (err) {
      if (this.closed) return;
    }
    this.again(waitMs);
  }

  close() {
    this.closed = true;
    clearTimeout(this.timer);
    this.es?.close();
    this.ctl?.abort();
  }
}
