// tally-reactions.d.ts — types of the <tally-reactions> web component module.
import type { ClientOptions, TallyClient } from './tally.js';

export interface ReactionsSettings extends ClientOptions {
  /** button text per kind, e.g. {like: '👍'} (rendered as text) */
  labels?: Record<string, string>;
  /** live counts over the page's one stream (default true) */
  live?: boolean;
}

/** Sets how every <tally-reactions> of the page talks to tally; connected elements reload. */
export function configure(settings: ReactionsSettings): void;
/** The client the elements use. */
export function tallyClient(): TallyClient;

/**
 * <tally-reactions item="post-1" kinds="like,dislike" split-reads>; events tally-load, tally-change,
 * tally-error. split-reads: this element's counts come from the public (cacheable) read and the
 * viewer's part from GET /v1/viewer, as configure({splitReads: true}) does for every element.
 */
export class TallyReactions extends HTMLElement {
  readonly item: string;
}
