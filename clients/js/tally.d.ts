// tally.d.ts — types of tally.js (docs/api.md). Kinds are strings ("like"); "none" is no reaction.

export type Id = string; // 1-128 of A-Z a-z 0-9 . _ : ~ - (not . or ..), sent raw
export type Kind = string;
export type Counts = Record<Kind, number>;

/** one mode: {reaction, version}; many mode: {reactions, version}. */
export interface Viewer {
  reaction?: Kind | 'none';
  reactions?: Kind[];
  version: number;
}

export interface Item {
  item: Id;
  counts: Counts;
  /** many mode: users whose set is not empty */
  reactors?: number;
  /** present when a user is known */
  viewer?: Viewer;
}

export interface ReactionState {
  item: Id;
  reaction?: Kind | 'none';
  reactions?: Kind[];
  version: number;
}

export interface WriteResult {
  item: Id;
  reaction?: Kind | 'none';
  previous?: Kind | 'none' | Kind[];
  reactions?: Kind[];
  version: number;
  changed: boolean;
  /** the change feed's cursor of this write's transition (when it changed something) */
  cursor?: string;
  /** the item's counts exactly as folding the change feed up to and including cursor gives (when
   * nothing changed: at some moment during the request); null while the item's policy hides them */
  counts: Record<Kind, number> | null;
  /** many mode: users whose set is not empty, as counts (null while hidden) */
  reactors?: number | null;
}

export interface WriteOptions {
  /** apply only if the user's row is at this version (0: never reacted); else TallyError 412 version-mismatch */
  ifMatch?: number;
  /** default: a fresh key per call (crypto.randomUUID), reused on that call's retries */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

export interface ListEntry {
  user?: Id;
  item?: Id;
  reaction?: Kind;
  reactions?: Kind[];
  at: string;
}

export interface ListPage {
  item?: Id;
  user?: Id;
  reactions: ListEntry[];
  /** present when there may be more: pass it as after */
  next?: string;
}

export interface ListOptions {
  reaction?: Kind;
  limit?: number;
  after?: string;
}

export interface Trending {
  window: '1m' | '1h' | '24h';
  reaction: Kind;
  items: { item: Id; gain: number }[];
  error_bound?: number;
}

export interface LiveCounts {
  item: Id;
  counts: Counts;
  reactors?: number;
  /** the change-feed cursor up to which these counts are folded */
  cursor: string | null;
}

export interface ClientOptions {
  /** default "": the page's origin */
  baseUrl?: string;
  /** a JWT for Authorization: Bearer, or null for none */
  getToken?: () => Promise<string | null> | string | null;
  /** development mode: sent as X-User-Id */
  userId?: string | (() => string | null) | null;
  /** retries of 503, 429 and network errors (default 3) */
  retries?: number;
  /** longest single wait between retries, whatever Retry-After says (default 10000) */
  maxRetryDelayMs?: number;
  fetch?: typeof fetch;
  /**
   * item and items read the counts without the user (the public answer a CDN or the browser may
   * cache) and the viewer's part from GET /v1/viewer, put back together (default false)
   */
  splitReads?: boolean;
}

export class TallyError extends Error {
  /** 0 when no answer came */
  status: number;
  /** the problem's stable code ("version-mismatch", "rate-limited", …), "network" when no answer */
  code: string;
  detail: string;
  /** the RFC 9457 body (a 412 carries the current reaction(s) and version) */
  problem: Record<string, unknown> | null;
  retryAfterS: number | null;
}

export class TallyClient {
  constructor(options?: ClientOptions);
  /** live streams read over fetch even where EventSource exists */
  forceFetchStream?: boolean;
  request(method: string, path: string, options?: {
    body?: unknown; headers?: Record<string, string>; signal?: AbortSignal; retries?: number; text?: boolean;
    /** without Authorization and X-User-Id: the public answer */
    anonymous?: boolean;
  }): Promise<{ status: number; body: any; headers: Headers }>;
  /** split: as splitReads, for this call */
  item(item: Id, options?: { split?: boolean }): Promise<Item>;
  items(ids: Id[], options?: { split?: boolean }): Promise<Item[]>;
  reaction(item: Id): Promise<ReactionState>;
  trending(options?: { reaction?: Kind; window?: '1m' | '1h' | '24h'; limit?: number }): Promise<Trending>;
  whoReacted(item: Id, options?: ListOptions): Promise<ListPage>;
  userReactions(user: Id, options?: ListOptions): Promise<ListPage>;
  pages(fetchPage: (after?: string) => Promise<ListPage>, options?: { maxPages?: number }): AsyncGenerator<ListPage>;
  /** a kind or "none"; in many mode an array sets the whole set */
  set(item: Id, reaction: Kind | 'none' | Kind[], options?: WriteOptions): Promise<WriteResult>;
  clear(item: Id, options?: WriteOptions): Promise<WriteResult>;
  add(item: Id, kind: Kind, options?: WriteOptions): Promise<WriteResult>;
  remove(item: Id, kind: Kind, options?: WriteOptions): Promise<WriteResult>;
  toggle(item: Id, kind: Kind, options?: WriteOptions): Promise<WriteResult>;
  /** live counts of item over the client's one stream; returns the unsubscribe function */
  subscribe(item: Id, onCounts: (counts: LiveCounts) => void): () => void;
  closeLive(): void;
}

export function createClient(options?: ClientOptions): TallyClient;
export function isValidId(id: unknown): boolean;
export function newIdempotencyKey(): string;
/** <0, 0, >0, or null when the cursors are not comparable */
export function compareCursors(a: string | null, b: string | null): number | null;

/** A change-feed entry (GET /v1/changes) or a webhook's transition. */
export interface Change {
  cursor: string; item: Id; user: Id; from: Kind | 'none' | Kind[]; to: Kind | 'none' | Kind[];
  version: number; at: string;
  /** [counted before, counted after]; absent means [true, true] (a voided user's entries) */
  counted?: [boolean, boolean];
}
/** Folds one entry into counts ({kind: n}, and reactors in many mode), in place: minus from if it
 * counted before, plus to if it counts after. Returns counts. */
export function foldChange(counts: Record<string, number>, entry: Change): Record<string, number>;

export class EventStreamParser {
  constructor(onEvent: (e: { event: string; data: string; id: string }) => void, onRetry?: (ms: number) => void);
  push(text: string): void;
}
