// helpers.js — for the JavaScript tests: start a real tallyd (build/tallyd, or $TALLYD) on a free
// loopback port with a throwaway data directory, stop it by its PID; JWTs made with node's crypto;
// validation of answers against the OpenAPI document's own schemas (ajv, JSON Schema 2020-12).
import { spawn, spawnSync } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const START_TIMEOUT_MS = 20000;
const STOP_TIMEOUT_MS = 15000;
const SANITIZER_RE = /ERROR: (AddressSanitizer|LeakSanitizer)|: runtime error: /;

/** Whether the tallyd under test has a flag (for tests of features other branches bring). */
export function tallydHasFlag(flag) {
  const bin = process.env.TALLYD ? resolve(REPO, process.env.TALLYD) : join(REPO, 'build', 'tallyd');
  return spawnSync(bin, ['--help'], { encoding: 'utf8' }).stdout.includes(flag);
}

/** Starts tallyd; resolves {url, adminUrl, pid, stop(), stderr()} once it prints its listening line. */
export function startTallyd({ args = [], env = {} } = {}) {
  const bin = process.env.TALLYD ? resolve(REPO, process.env.TALLYD) : join(REPO, 'build', 'tallyd');
  const dir = mkdtempSync(join(tmpdir(), 'tally-js-'));
  const childEnv = { ...process.env, ...env };
  if (!('TALLY_JWT_SECRET' in env)) delete childEnv.TALLY_JWT_SECRET;
  const child = spawn(bin, ['--listen', '127.0.0.1:0', '--data', join(dir, 'data'), '--threads', '2', ...args],
    { env: childEnv, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '', err = '';
  child.stderr.on('data', (d) => { err += d; });
  return new Promise((resolveStart, reject) => {
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`tallyd did not start: ${err}`)); }, START_TIMEOUT_MS);
    child.on('exit', (code) => { clearTimeout(timer); reject(new Error(`tallyd exited ${code}: ${err}`)); });
    child.stdout.on('data', (d) => {
      out += d;
      const m = /(?<!admin )listening on (http:\/\/[^\s]+)/.exec(out);
      if (!m) return;
      clearTimeout(timer);
      child.removeAllListeners('exit');
      const exited = new Promise((r) => child.on('exit', r));
      const admin = /admin listening on (http:\/\/[^\s]+)/.exec(out);
      resolveStart({
        url: m[1],
        adminUrl: admin ? admin[1] : null,
        pid: child.pid,
        stderr: () => err,
        /** Stops it (SIGTERM, then SIGKILL after a bound); throws on a sanitizer report or a bad exit. */
        async stop() {
          if (child.exitCode === null) process.kill(child.pid, 'SIGTERM');
          const t = setTimeout(() => { if (child.exitCode === null) process.kill(child.pid, 'SIGKILL'); }, STOP_TIMEOUT_MS);
          const code = await exited;
          clearTimeout(t);
          rmSync(dir, { recursive: true, force: true });
          if (SANITIZER_RE.test(err)) throw new Error(`tallyd: sanitizer report:\n${err}`);
          if (code !== 0) throw new Error(`tallyd exited with status ${code}:\n${err.slice(-2000)}`);
        },
      });
    });
  });
}

const b64url = (x) => Buffer.from(x).toString('base64url');

/** An HS256 JWT for sub (role "admin" when admin), valid for an hour. */
export function makeJwt(secret, sub, { admin = false, expS = 3600 } = {}) {
  const head = b64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' }));
  const claims = { sub, exp: Math.floor(Date.now() / 1000) + expS };
  if (admin) claims.role = 'admin';
  const body = b64url(JSON.stringify(claims));
  const sig = createHmac('sha256', secret).update(`${head}.${body}`).digest('base64url');
  return `${head}.${body}.${sig}`;
}

/** A JSON pointer of path segments. */
export const pointer = (...segs) => segs.map((s) => String(s).replace(/~/g, '~0').replace(/\//g, '~1')).join('/');

/** Validates answers against one OpenAPI document. */
export class DocValidator {
  constructor(doc) {
    this.doc = doc;
    this.ajv = new Ajv2020({ strict: false, allErrors: true });
    addFormats(this.ajv);
    this.ajv.addSchema({ $id: 'tally', components: { schemas: doc.components.schemas } });
    this.cache = new Map();
  }

  /** A validate function for a schema found in the document (its $refs into components resolved). */
  compile(schema) {
    const key = JSON.stringify(schema);
    if (!this.cache.has(key)) {
      const fixed = JSON.parse(key.replaceAll('"#/components/schemas/', '"tally#/components/schemas/'));
      this.cache.set(key, this.ajv.compile(fixed));
    }
    return this.cache.get(key);
  }

  /** Throws unless (status, content type, body) is an answer the document gives for this operation. */
  check(method, template, status, contentType, body, headers = null) {
    const op = this.doc.paths[template]?.[method.toLowerCase()];
    if (!op) throw new Error(`${method} ${template} is not in the document`);
    const resp = op.responses[String(status)];
    if (!resp) throw new Error(`${method} ${template}: status ${status} is not documented (${JSON.stringify(body)})`);
    if (!resp.content) return;
    const media = (contentType || '').split(';')[0].trim();
    const m = resp.content[media];
    if (!m) throw new Error(`${method} ${template} ${status}: content type ${media} is not documented`);
    // application/x-ndjson is lines of JSON, documented as a string: checked as text
    const value = media.endsWith('json') && !media.endsWith('ndjson') ? JSON.parse(body) : body;
    const validate = this.compile(m.schema);
    if (!validate(value)) {
      throw new Error(`${method} ${template} ${status}: ${this.ajv.errorsText(validate.errors)} in ${body.slice(0, 400)}`);
    }
    for (const name of Object.keys(resp.headers || {})) {
      if (name === 'ETag' && headers && !headers.get('etag')) throw new Error(`${method} ${template} ${status}: no ETag`);
    }
  }
}
