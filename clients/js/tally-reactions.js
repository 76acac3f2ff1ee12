// tally-reactions.js — <tally-reactions item="post-1">: a reactions button bar for any page.
//
//   <script type="module" src="https://tally.example/ui/tally-reactions.js"></script>
//   <tally-reactions item="post-1"></tally-reactions>
//   <tally-reactions item="post-2" split-reads></tally-reactions>   (counts from a cacheable read)
//   import { configure } from 'https://tally.example/ui/tally-reactions.js';
//   configure({ getToken: async () => myJwt });
//
// Each kind is a real <button> with aria-pressed. A click is optimistic (counts and pressed state change
// at once) and rolled back if the write fails; it sends the state it wants (PUT or DELETE of that kind,
// never a blind toggle) and clicks are ignored while one is in flight. Counts stay live over one stream
// per page (shared by every button). Values from the API are rendered as text, never as HTML.
import { createClient, compareCursors, TallyError } from './tally.js';

const BATCH_MAX = 100; // GET /v1/items?ids= takes at most 100
const LOAD_RETRIES = 3; // a failed first read is tried again after 2, 4, 8 s
const LOAD_RETRY_MS = 1000;

let settings = { baseUrl: new URL(import.meta.url).origin, live: true, labels: {} };
let client = null;
const elements = new Set(); // connected <tally-reactions>
let loadQueue = null; // elements waiting for the next batch read

function currentClient() {
  if (!client) client = createClient(settings);
  return client;
}

/**
 * Sets how every <tally-reactions> of the page talks to tally: baseUrl (default: where this script
 * came from), getToken (async () => JWT or null), userId (development mode), labels ({like: "👍"}),
 * live (false: no live counts), retries. The connected elements reload with it.
 */
export function configure(options = {}) {
  settings = { ...settings, ...options, labels: { ...settings.labels, ...(options.labels || {}) } };
  client?.closeLive();
  client = null;
  for (const el of elements) el.restart();
}

/** The client the elements use (for the page's own calls). */
export function tallyClient() {
  return currentClient();
}

// Every element connected in one task is read with one GET /v1/items?ids= (a feed page is one request).
function queueLoad(el) {
  if (!loadQueue) {
    loadQueue = new Set();
    queueMicrotask(runLoads);
  }
  loadQueue.add(el);
}

// Elements with split-reads (or every element, after configure({splitReads: true})) are read apart
// from the others: their counts without the user, their viewer's part from GET /v1/viewer.
async function runLoads() {
  const batch = [...loadQueue];
  loadQueue = null;
  const c = currentClient();
  for (const split of [false, true]) {
    const mine = batch.filter((el) => el.splitReads() === split);
    for (let i = 0; i < mine.length; i += BATCH_MAX) {
      const group = mine.slice(i, i + BATCH_MAX);
      const ids = [...new Set(group.map((el) => el.item))];
      try {
        const items = await c.items(ids, { split });
        const byId = new Map(items.map((it) => [it.item, it]));
        group.forEach((el) => el.loaded(byId.get(el.item)));
      } catch (err) {
        group.forEach((el) => el.failed(err));
      }
    }
  }
}

function message(err) {
  if (!(err instanceof TallyError)) return 'something went wrong';
  switch (err.code) {
    case 'unauthenticated': return 'sign in to react';
    case 'rate-limited': return 'too many clicks: try again in a moment';
    case 'overloaded':
    case 'unavailable':
    case 'network': return 'tally is unavailable: not saved';
    default: return `not saved (${err.code})`;
  }
}

const CLOSED_MESSAGE = 'Reactions are closed on this item.';
let statusIds = 0;

export class TallyReactions extends HTMLElement {
  static get observedAttributes() { return ['item', 'kinds', 'split-reads']; }

  constructor() {
    super();
    this.counts = null; // {kind: n}
    this.viewer = null; // {reaction, version} or {reactions:[…], version}
    this.reactors = undefined;
    this.policy = null; // the item's policy, when one applies: {kinds, closed, counts, max_kinds}
    this.busy = false;
    this.writeCursor = null; // the cursor of our last write: older pushed counts lack it
    this.unsubscribe = null;
    this.buttons = new Map();
  }

  get item() { return this.getAttribute('item') || ''; }

  splitReads() { return this.hasAttribute('split-reads') || !!settings.splitReads; }

  connectedCallback() {
    elements.add(this);
    if (!this.group) this.build();
    this.restart();
  }

  disconnectedCallback() {
    elements.delete(this);
    this.unsubscribe?.();
    this.unsubscribe = null;
  }

  attributeChangedCallback(name, oldValue, newValue) {
    if (oldValue !== newValue && this.isConnected && this.group) {
      if (name === 'kinds') this.renderButtons();
      else this.restart();
    }
  }

  restart() {
    this.unsubscribe?.();
    this.unsubscribe = null;
    this.counts = null;
    this.viewer = null;
    this.policy = null;
    this.writeCursor = null;
    this.liveSeen = false;
    this.ready = false; // the viewer's state is known
    this.loadAttempts = 0;
    this.generation = (this.generation || 0) + 1;
    this.render();
    if (!this.item) return;
    queueLoad(this);
    if (settings.live) this.unsubscribe = currentClient().subscribe(this.item, (msg) => this.pushed(msg));
  }

  build() {
    this.group = document.createElement('div');
    this.group.className = 'tally-reactions';
    this.group.setAttribute('role', 'group');
    this.group.setAttribute('aria-label', 'Reactions');
    this.status = document.createElement('span');
    this.status.className = 'tally-status';
    this.status.setAttribute('role', 'status');
    this.status.setAttribute('aria-live', 'polite');
    this.replaceChildren(this.group, this.status);
  }

  // The kinds offered: the attribute's (or every kind the counts name, or the policy's when the counts
  // are hidden), less those the item's policy does not allow, unless the viewer holds one (to take it back).
  kinds() {
    const attr = this.getAttribute('kinds');
    let kinds;
    if (attr) kinds = [...new Set(attr.split(',').map((k) => k.trim()).filter(Boolean))];
    else if (this.counts) kinds = Object.keys(this.counts);
    else kinds = this.policy ? [...this.policy.kinds] : [];
    if (!this.policy) return kinds;
    return kinds.filter((k) => this.policy.kinds.includes(k) || this.holds(k));
  }

  closed() {
    return !!(this.policy && this.policy.closed);
  }

  many() {
    return !!(this.viewer && Array.isArray(this.viewer.reactions)) || this.reactors !== undefined;
  }

  holds(kind) {
    if (!this.viewer) return false;
    return Array.isArray(this.viewer.reactions) ? this.viewer.reactions.includes(kind) : this.viewer.reaction === kind;
  }

  renderButtons() {
    const kinds = this.kinds();
    for (const [kind, b] of this.buttons) if (!kinds.includes(kind)) { b.remove(); this.buttons.delete(kind); }
    for (const kind of kinds) {
      if (this.buttons.has(kind)) continue;
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'tally-button';
      b.dataset.kind = kind;
      const label = document.createElement('span');
      label.className = 'tally-label';
      const count = document.createElement('span');
      count.className = 'tally-count';
      b.append(label, ' ', count);
      b.addEventListener('click', () => this.click(kind));
      this.group.append(b);
      this.buttons.set(kind, b);
    }
    this.render();
  }

  render() {
    if (!this.group) return;
    if (this.buttons.size !== this.kinds().length) {
      this.renderButtons();
      return;
    }
    for (const [kind, b] of this.buttons) {
      const n = this.counts?.[kind];
      b.querySelector('.tally-label').textContent = settings.labels[kind] || kind;
      b.querySelector('.tally-count').textContent = n === undefined ? '' : String(n);
      b.setAttribute('aria-pressed', String(this.holds(kind)));
      // Until the first read says what the viewer holds a click could not say what it wants (a count
      // the live stream pushed may be shown already): the button is not offered yet.
      // A closed item's buttons stay shown, disabled, and say why (the status region announces it).
      b.disabled = !this.ready || this.closed();
      if (this.closed()) b.setAttribute('aria-describedby', this.statusId());
      else b.removeAttribute('aria-describedby');
    }
    this.toggleAttribute('closed', this.closed());
    if (this.closed()) this.status.textContent = CLOSED_MESSAGE;
    else if (this.status.textContent === CLOSED_MESSAGE) this.status.textContent = '';
    this.toggleAttribute('busy', this.busy);
    this.group.setAttribute('aria-busy', String(this.busy));
  }

  statusId() {
    if (!this.status.id) this.status.id = 'tally-status-' + (++statusIds);
    return this.status.id;
  }

  // The first read. Counts already pushed by the live stream are kept: the stream started with the
  // current counts and pushes every change after, while this answer may have been read before them.
  loaded(obj) {
    if (!obj) return;
    if (!this.liveSeen) {
      this.counts = obj.counts ? { ...obj.counts } : null;
      this.reactors = obj.reactors;
    }
    this.policy = obj.policy || null;
    this.viewer = obj.viewer || null;
    this.ready = true;
    this.removeAttribute('error');
    this.status.textContent = '';
    this.render();
    this.dispatchEvent(new CustomEvent('tally-load', { detail: obj }));
  }

  // The first read failed (the client already retried): show why, and try again a few times.
  failed(err) {
    this.setAttribute('error', err.code || 'error');
    this.status.textContent = message(err);
    const attempt = (this.loadAttempts = (this.loadAttempts || 0) + 1);
    if (attempt <= LOAD_RETRIES) {
      const generation = this.generation;
      setTimeout(() => { if (this.isConnected && this.generation === generation) queueLoad(this); }, LOAD_RETRY_MS * 2 ** attempt);
    }
  }

  // A count pushed by the live stream: taken unless it is older than our own write (it would undo
  // the click on screen) or a write is in flight (its answer comes first).
  pushed(msg) {
    if (this.busy) {
      this.pending = msg;
      return;
    }
    if (this.writeCursor) {
      const order = compareCursors(msg.cursor, this.writeCursor);
      if (order !== null && order < 0) return;
      this.writeCursor = null;
    }
    this.counts = msg.counts ? { ...msg.counts } : null;
    if (msg.reactors !== undefined) this.reactors = msg.reactors;
    if (msg.policy !== undefined || this.policy) this.policy = msg.policy || null;
    this.liveSeen = true;
    this.render();
  }

  // The state after clicking kind, drawn at once.
  optimistic(kind, had) {
    const counts = { ...this.counts };
    const bump = (k, d) => { if (k && k !== 'none' && counts[k] !== undefined) counts[k] = Math.max(0, counts[k] + d); };
    let viewer;
    if (this.many()) {
      const set = new Set(this.viewer?.reactions || []);
      if (had) set.delete(kind); else set.add(kind);
      bump(kind, had ? -1 : 1);
      viewer = { reactions: this.kinds().filter((k) => set.has(k)), version: this.viewer?.version ?? 0 };
    } else {
      const previous = this.viewer?.reaction;
      if (had) bump(kind, -1);
      else { bump(previous, -1); bump(kind, 1); }
      viewer = { reaction: had ? 'none' : kind, version: this.viewer?.version ?? 0 };
    }
    return { counts, viewer };
  }

  async click(kind) {
    if (this.busy || !this.ready) return; // one write at a time: a double click counts once
    const had = this.holds(kind);
    const before = { counts: this.counts, viewer: this.viewer };
    const next = this.optimistic(kind, had);
    this.counts = next.counts;
    this.viewer = next.viewer;
    this.busy = true;
    this.status.textContent = '';
    this.removeAttribute('error');
    this.render();
    const c = currentClient();
    try {
      // The state wanted, said as such: a retry or a second tab cannot turn it into its opposite.
      const r = had ? await c.remove(this.item, kind) : await c.add(this.item, kind);
      this.viewer = Array.isArray(r.reactions) ? { reactions: r.reactions, version: r.version }
        : { reaction: r.reaction, version: r.version };
      if (r.cursor) this.writeCursor = r.cursor;
      if ('counts' in r) {
        // The answer's counts: exactly this write and everything before it (null while hidden),
        // so they replace the drawing's guess, also when nothing changed.
        this.counts = r.counts ? { ...r.counts } : null;
        if (r.reactors !== undefined) this.reactors = r.reactors;
      } else if (!r.changed) { // a server without counts in its answers
        const fresh = await c.item(this.item).catch(() => null); // the drawing assumed a change
        if (fresh) { this.counts = fresh.counts ? { ...fresh.counts } : null; this.viewer = fresh.viewer || this.viewer; }
      }
      this.dispatchEvent(new CustomEvent('tally-change', { detail: r }));
    } catch (err) {
      this.counts = before.counts;
      this.viewer = before.viewer;
      this.setAttribute('error', err.code || 'error');
      this.status.textContent = message(err);
      this.dispatchEvent(new CustomEvent('tally-error', { detail: err }));
    } finally {
      this.busy = false;
      this.render();
      const pending = this.pending;
      this.pending = null;
      if (pending) this.pushed(pending);
    }
  }
}

if (!customElements.get('tally-reactions')) customElements.define('tally-reactions', TallyReactions);
