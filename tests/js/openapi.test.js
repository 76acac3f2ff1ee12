// openapi.test.js — GET /v1/openapi.json of a running tallyd: (a) a real OpenAPI 3.1 validator
// (redocly lint) passes it, in development and JWT mode and with other kinds; (c) its examples are
// valid against their own schemas; (d) real answers of every route (and of the usual errors) are
// valid against the document's schemas, and every operation of the document is exercised.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { startTallyd, makeJwt, DocValidator, REPO, tallydHasFlag } from './helpers.js';

const run = promisify(execFile);
const SECRET = 'openapi-test-secret-0123456789abcdef';
let dev, jwt, devDoc, jwtDoc;

before(async () => {
  [dev, jwt] = await Promise.all([
    startTallyd({ args: ['--reactions', 'like,love,wow', '--rate-limit', 'off'] }),
    startTallyd({ env: { TALLY_JWT_SECRET: SECRET } }),
  ]);
  devDoc = await (await fetch(`${dev.url}/v1/openapi.json`)).json();
  jwtDoc = await (await fetch(`${jwt.url}/v1/openapi.json`)).json();
});

after(async () => {
  await Promise.all([dev?.stop(), jwt?.stop()]);
});

async function lint(doc) {
  const dir = mkdtempSync(join(tmpdir(), 'tally-oa-'));
  const file = join(dir, 'openapi.json');
  writeFileSync(file, JSON.stringify(doc));
  try {
    return await run(join(REPO, 'node_modules', '.bin', 'redocly'), ['lint', '--format', 'stylish', file],
      { cwd: REPO, timeout: 60000, env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' } });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('redocly lint passes the document (development mode, three kinds)', async () => {
  await lint(devDoc); // throws (exit status 1) on any error
});

test('redocly lint passes the document (JWT mode)', async () => {
  await lint(jwtDoc);
});

test('redocly lint passes the document of a server with --admin-listen (and 404 is documented there)', async () => {
  const split = await startTallyd({ args: ['--admin-listen', '127.0.0.1:0'] });
  try {
    const doc = await (await fetch(`${split.adminUrl}/v1/openapi.json`)).json();
    assert.equal(doc['x-tally']['admin-listener'], true);
    await lint(doc);
    const v = new DocValidator(doc);
    const res = await fetch(`${split.url}/v1/admin/hot`, { headers: { 'X-User-Id': 'admin' } });
    v.check('GET', '/v1/admin/hot', res.status, res.headers.get('content-type'), await res.text());
    assert.equal(res.status, 404);
  } finally {
    await split.stop();
  }
});

// Many mode comes with another branch: runs once tallyd has --reaction-mode.
test('many mode: the document has arrays, passes lint, and real answers match it', async (t) => {
  if (!tallydHasFlag('--reaction-mode')) {
    t.skip('tallyd has no --reaction-mode in this build (enable: merge the many-mode branch)');
    return;
  }
  const many = await startTallyd({ args: ['--reaction-mode', 'many', '--reactions', 'like,love'] });
  try {
    const doc = await (await fetch(`${many.url}/v1/openapi.json`)).json();
    assert.equal(doc['x-tally']['reaction-mode'], 'many');
    assert.ok(doc.components.schemas.ReactionSet);
    await lint(doc);
    const { call } = exerciser(many, doc);
    const u = { 'X-User-Id': 'm1', 'Idempotency-Key': 'mk1' };
    await call('PUT', '/v1/items/{item}/reaction', '/v1/items/m-1/reaction', { headers: u, body: { reactions: ['like', 'love'] }, expect: 200 });
    await call('DELETE', '/v1/items/{item}/{kind}', '/v1/items/m-1/love', { headers: { 'X-User-Id': 'm1' }, expect: 200 });
    await call('GET', '/v1/items/{item}', '/v1/items/m-1', { headers: { 'X-User-Id': 'm1' }, expect: 200 });
    await call('GET', '/v1/items/{item}/reaction', '/v1/items/m-1/reaction', { headers: { 'X-User-Id': 'm1' }, expect: 200 });
    await call('PUT', '/v1/items/{item}/reaction', '/v1/items/m-1/reaction', { headers: { 'X-User-Id': 'm1', 'If-Match': '"9"' }, body: { reactions: [] }, expect: 412 });
  } finally {
    await many.stop();
  }
});

test('redocly lint fails a broken document (the check can fail)', async () => {
  const broken = structuredClone(devDoc);
  broken.paths['/v1/items/{item}'].get.responses = { 200: { content: {} } }; // no description
  await assert.rejects(lint(broken));
});

test('the document follows the configuration', () => {
  assert.equal(devDoc.openapi, '3.1.0');
  assert.deepEqual(devDoc.components.schemas.Kind.enum, ['like', 'love', 'wow']);
  assert.deepEqual(jwtDoc.components.schemas.Kind.enum, ['like', 'dislike']);
  assert.ok(devDoc.components.securitySchemes.devUser);
  assert.equal(jwtDoc.components.securitySchemes.bearer.bearerFormat, 'JWT');
  assert.equal(devDoc['x-tally']['development-mode'], true);
  const ids = devDoc.components.parameters.ids;
  assert.equal(ids.explode, false);
  assert.equal(ids.style, 'form');
  assert.equal(devDoc.components.schemas.Id.pattern, '^[A-Za-z0-9._:~-]{1,128}$');
  const put = devDoc.paths['/v1/items/{item}/reaction'].put;
  const refs = put.parameters.map((p) => p.$ref);
  assert.ok(refs.includes('#/components/parameters/idempotencyKey') && refs.includes('#/components/parameters/ifMatch'));
  assert.ok(put.responses['200'].headers.ETag);
  assert.ok(put.responses['503'].headers['Retry-After']);
  assert.ok(jwtDoc.paths['/v1/items/{item}/reaction'].put.responses['401'].headers['WWW-Authenticate']);
  const tags = new Set(devDoc.tags.map((t) => t.name));
  for (const [path, ops] of Object.entries(devDoc.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      assert.ok(op.tags?.length && op.tags.every((t) => tags.has(t)), `${method} ${path}: tags ${op.tags}`);
    }
  }
});

test('every example in the document is valid against its schema', () => {
  for (const doc of [devDoc, jwtDoc]) {
    const v = new DocValidator(doc);
    let n = 0;
    for (const [name, schema] of Object.entries(doc.components.schemas)) {
      for (const ex of schema.examples || []) {
        const validate = v.compile({ $ref: `#/components/schemas/${name}` });
        assert.ok(validate(ex), `${name} example ${JSON.stringify(ex)}: ${v.ajv.errorsText(validate.errors)}`);
        n++;
      }
    }
    assert.ok(n >= 8, `only ${n} examples`);
    // and a wrong example would be caught
    const validate = v.compile({ $ref: '#/components/schemas/Item' });
    assert.equal(validate({ item: 'a b', counts: {} }), false);
  }
});

/** Sends one request and checks the answer against the document; records the operation exercised. */
function exerciser(server, doc) {
  const v = new DocValidator(doc);
  const seen = new Set();
  const call = async (method, template, target, { headers = {}, body, expect } = {}) => {
    const init = { method, headers: { ...headers } };
    if (body !== undefined) {
      init.body = typeof body === 'string' ? body : JSON.stringify(body);
      if (!init.headers['Content-Type']) init.headers['Content-Type'] = 'application/json';
    }
    const res = await fetch(server.url + target, init);
    const text = await res.text();
    if (expect !== undefined) assert.equal(res.status, expect, `${method} ${target}: ${text}`);
    v.check(method, template, res.status, res.headers.get('content-type'), text, res.headers);
    if (res.ok) seen.add(`${method.toLowerCase()} ${template}`);
    return { status: res.status, body: text, headers: res.headers, json: () => JSON.parse(text) };
  };
  return { call, seen, v };
}

test('real answers of every route match the document (development mode)', async () => {
  const { call, seen, v } = exerciser(dev, devDoc);
  const u = { 'X-User-Id': 'u:1~a' };
  const admin = { 'X-User-Id': 'admin' };
  const key = (k) => ({ ...u, 'Idempotency-Key': k });
  const item = 'post:1.a~b_c-d'; // every character of the alphabet that an encoder would touch, raw
  await call('GET', '/v1/items/{item}', `/v1/items/${item}`, { expect: 200 });
  await call('PUT', '/v1/items/{item}/reaction', `/v1/items/${item}/reaction`, { headers: key('k1'), body: { reaction: 'love' }, expect: 200 });
  const replay = await call('PUT', '/v1/items/{item}/reaction', `/v1/items/${item}/reaction`, { headers: key('k1'), body: { reaction: 'love' }, expect: 200 });
  assert.equal(replay.headers.get('idempotent-replayed'), 'true');
  await call('GET', '/v1/items/{item}', `/v1/items/${item}`, { headers: u, expect: 200 });
  await call('GET', '/v1/items', `/v1/items?ids=${item},other,x:y`, { headers: u, expect: 200 });
  const pub = await call('GET', '/v1/items', `/v1/items?ids=${item},other`, { expect: 200 });
  await call('GET', '/v1/items', `/v1/items?ids=${item},other`, { headers: { 'If-None-Match': pub.headers.get('etag') }, expect: 304 });
  await call('GET', '/v1/viewer', `/v1/viewer?ids=${item},other`, { headers: u, expect: 200 });
  await call('GET', '/v1/viewer', `/v1/viewer?ids=${item}`, { expect: 401 });
  const r = await call('GET', '/v1/items/{item}/reaction', `/v1/items/${item}/reaction`, { headers: u, expect: 200 });
  assert.equal(r.headers.get('etag'), '"1"');
  await call('PUT', '/v1/items/{item}/{kind}', `/v1/items/${item}/wow`, { headers: key('k2'), expect: 200 });
  await call('DELETE', '/v1/items/{item}/{kind}', `/v1/items/${item}/wow`, { headers: u, expect: 200 });
  await call('POST', '/v1/items/{item}/reaction:toggle', `/v1/items/${item}/reaction:toggle`, { headers: key('k3'), body: { reaction: 'like' }, expect: 200 });
  await call('DELETE', '/v1/items/{item}/reaction', `/v1/items/${item}/reaction`, { headers: u, expect: 200 });
  // the errors a client meets
  await call('GET', '/v1/items/{item}', '/v1/items/a%20b', { expect: 400 });
  await call('GET', '/v1/items', `/v1/items?ids=${Array.from({ length: 101 }, (_, i) => `i${i}`).join(',')}`, { expect: 400 });
  const pre = await call('PUT', '/v1/items/{item}/reaction', `/v1/items/${item}/reaction`, { headers: { ...u, 'If-Match': '"99"' }, body: { reaction: 'like' }, expect: 412 });
  assert.equal(pre.json().type, 'urn:tally:error:version-mismatch');
  await call('PUT', '/v1/items/{item}/reaction', `/v1/items/${item}/reaction`, { headers: key('k1'), body: { reaction: 'wow' }, expect: 409 });
  await call('PUT', '/v1/items/{item}/reaction', `/v1/items/${item}/reaction`, { headers: u, body: { reaction: 'nope' }, expect: 400 });
  await call('PUT', '/v1/items/{item}/reaction', `/v1/items/${item}/reaction`, { headers: u, body: '{', expect: 400 });
  await call('PUT', '/v1/items/{item}/reaction', `/v1/items/${item}/reaction`, { headers: { ...u, 'Content-Type': 'text/plain' }, body: 'x', expect: 415 });
  await call('POST', '/v1/items/{item}/reaction:toggle', `/v1/items/${item}/reaction:toggle`, { headers: u, body: { reaction: 'like' }, expect: 400 });
  await call('PUT', '/v1/items/{item}/{kind}', `/v1/items/${item}/like`, { expect: 401 });
  await call('PUT', '/v1/items/{item}/{kind}', `/v1/items/${item}/like`, { headers: { 'X-User-Id': 'a b' }, expect: 400 });
  // public and operations
  await call('GET', '/v1/trending', '/v1/trending?reaction=love&window=1m&limit=5', { expect: 200 });
  await call('GET', '/v1/trending', '/v1/trending?window=2h', { expect: 400 });
  await call('GET', '/healthz', '/healthz', { expect: 200 });
  await call('GET', '/readyz', '/readyz', { expect: 200 });
  await call('GET', '/metrics', '/metrics', { expect: 200 });
  const oa = await call('GET', '/v1/openapi.json', '/v1/openapi.json', { expect: 200 });
  await call('GET', '/v1/openapi.json', '/v1/openapi.json', { headers: { 'If-None-Match': oa.headers.get('etag') }, expect: 304 });
  // admin
  await call('GET', '/v1/admin/hot', '/v1/admin/hot', { headers: u, expect: 403 });
  await call('GET', '/v1/admin/hot', '/v1/admin/hot', { headers: admin, expect: 200 });
  await call('GET', '/v1/changes', '/v1/changes?limit=10', { headers: admin, expect: 200 });
  await call('GET', '/v1/changes', '/v1/changes?after=zz', { headers: admin, expect: 400 });
  await call('POST', '/v1/admin/recount', '/v1/admin/recount', { headers: admin, body: { items: [item] }, expect: 200 });
  await call('POST', '/v1/admin/import', '/v1/admin/import', {
    headers: { ...admin, 'Content-Type': 'application/x-ndjson' },
    body: '{"item":"imp-1","user":"u2","reaction":"like"}\n{"item":"bad id","user":"u2","reaction":"like"}\n',
    expect: 200,
  });
  await call('POST', '/v1/admin/import', '/v1/admin/import?on-error=abort', {
    headers: { ...admin, 'Content-Type': 'application/x-ndjson' }, body: '{"item":"bad id","user":"u2","reaction":"like"}\n', expect: 400,
  });
  // voiding a user: the feed then carries "counted"
  await call('PUT', '/v1/items/{item}/reaction', '/v1/items/v-1/reaction', { headers: { 'X-User-Id': 'bot1' }, body: { reaction: 'like' }, expect: 200 });
  await call('POST', '/v1/admin/users/{user}/void', '/v1/admin/users/bot1/void', { headers: admin, expect: 200 });
  await call('POST', '/v1/admin/users/{user}/void', '/v1/admin/users/bot1/void', { headers: u, expect: 403 });
  await call('POST', '/v1/admin/users/{user}/void', '/v1/admin/users/a%20b/void', { headers: admin, expect: 400 });
  await call('GET', '/v1/admin/users/{user}', '/v1/admin/users/bot1', { headers: admin, expect: 200 });
  const voidedFeed = await call('GET', '/v1/changes', '/v1/changes?limit=1000', { headers: admin, expect: 200 });
  assert.ok(voidedFeed.json().changes.some((e) => e.user === 'bot1' && e.counted && !e.counted[1]));
  await call('POST', '/v1/admin/users/{user}/restore', '/v1/admin/users/bot1/restore', { headers: admin, expect: 200 });
  await call('DELETE', '/v1/admin/users/{user}', '/v1/admin/users/u2', { headers: admin, expect: 200 });
  await call('DELETE', '/v1/admin/items/{item}', `/v1/admin/items/${item}`, { headers: admin, expect: 200 });
  // the lists (once the build has them): default access, admin for who reacted, the owner for theirs
  if (devDoc.paths['/v1/items/{item}/reactions']) {
    await call('PUT', '/v1/items/{item}/{kind}', `/v1/items/${item}/love`, { headers: key('k4'), expect: 200 });
    const page = await call('GET', '/v1/items/{item}/reactions', `/v1/items/${item}/reactions?reaction=love&limit=1`, { headers: admin, expect: 200 });
    assert.equal(page.json().reactions[0].user, 'u:1~a');
    await call('GET', '/v1/items/{item}/reactions', `/v1/items/${item}/reactions?limit=0`, { headers: admin, expect: 400 });
    await call('GET', '/v1/items/{item}/reactions', `/v1/items/${item}/reactions`, { headers: u, expect: 403 });
    await call('GET', '/v1/users/{user}/reactions', '/v1/users/u:1~a/reactions', { headers: u, expect: 200 });
    await call('GET', '/v1/users/{user}/reactions', '/v1/users/someone/reactions', { headers: u, expect: 403 });
    await call('DELETE', '/v1/items/{item}/{kind}', `/v1/items/${item}/love`, { headers: u, expect: 200 });
  }
  // exports: the user's own, another's refused, the whole store's with its closing line (NDJSON)
  await call('PUT', '/v1/items/{item}/{kind}', '/v1/items/exp-1/like', { headers: key('k5'), expect: 200 });
  await call('GET', '/v1/users/{user}/export', '/v1/users/u:1~a/export', { headers: u, expect: 200 });
  await call('GET', '/v1/users/{user}/export', '/v1/users/someone/export', { headers: u, expect: 403 });
  await call('GET', '/v1/users/{user}/export', '/v1/users/someone/export', { expect: 401 });
  const whole = await call('GET', '/v1/admin/export', '/v1/admin/export', { headers: admin, expect: 200 });
  const exported = whole.body.trim().split('\n').map((line) => JSON.parse(line));
  assert.deepEqual(exported.at(-1), { export: 'complete', lines: exported.length - 1 });
  assert.ok(exported.some((x) => x.item === 'exp-1' && x.user === 'u:1~a' && x.reaction === 'like'));
  await call('GET', '/v1/admin/export', '/v1/admin/export', { headers: u, expect: 403 });
  // item policies: put, get, list, refused body, delete, unknown
  await call('PUT', '/v1/admin/policies/{target}', '/v1/admin/policies/oa-*', { headers: admin, body: { kinds: ['like'], counts: 'hidden' }, expect: 200 });
  await call('PUT', '/v1/admin/policies/{target}', '/v1/admin/policies/oa-*', { headers: admin, body: { kinds: [] }, expect: 400 });
  await call('GET', '/v1/admin/policies/{target}', '/v1/admin/policies/oa-*', { headers: admin, expect: 200 });
  await call('GET', '/v1/admin/policies', '/v1/admin/policies', { headers: admin, expect: 200 });
  await call('GET', '/v1/items/{item}', '/v1/items/oa-1', { expect: 200 }); // counts null, policy member
  await call('DELETE', '/v1/admin/policies/{target}', '/v1/admin/policies/oa-*', { headers: admin, expect: 204 });
  await call('DELETE', '/v1/admin/policies/{target}', '/v1/admin/policies/oa-*', { headers: admin, expect: 404 });
  // webhooks (once the build has them): create, list, rotate, resume, delete
  if (devDoc.paths['/v1/admin/webhooks']) {
    const created = await call('POST', '/v1/admin/webhooks', '/v1/admin/webhooks', { headers: admin, body: { url: 'https://hooks.example.invalid/tally' }, expect: 201 });
    const id = created.json().id;
    await call('POST', '/v1/admin/webhooks', '/v1/admin/webhooks', { headers: admin, body: { url: 'ftp://x' }, expect: 400 });
    const list = await call('GET', '/v1/admin/webhooks', '/v1/admin/webhooks', { headers: admin, expect: 200 });
    assert.ok(list.json().webhooks.some((w) => w.id === id));
    await call('POST', '/v1/admin/webhooks/{webhook}/secret', `/v1/admin/webhooks/${id}/secret`, { headers: admin, expect: 200 });
    await call('POST', '/v1/admin/webhooks/{webhook}/resume', `/v1/admin/webhooks/${id}/resume`, { headers: admin, body: {}, expect: 200 });
    await call('DELETE', '/v1/admin/webhooks/{webhook}', `/v1/admin/webhooks/${id}`, { headers: admin, expect: 204 });
    await call('DELETE', '/v1/admin/webhooks/{webhook}', `/v1/admin/webhooks/${id}`, { headers: admin, expect: 404 });
  }
  // live counts (once the build has them): the stream's head, and a refusal
  if (devDoc.paths['/v1/live']) {
    const ctl = new AbortController();
    const res = await fetch(`${dev.url}/v1/live?ids=${item},other`, { signal: ctl.signal });
    assert.equal(res.status, 200);
    const first = await res.body.getReader().read(); // the stream has begun (retry: …)
    assert.match(new TextDecoder().decode(first.value), /retry: \d+/);
    ctl.abort();
    v.check('GET', '/v1/live', res.status, res.headers.get('content-type'), '');
    seen.add('get /v1/live');
    await call('GET', '/v1/live', `/v1/live?ids=${Array.from({ length: 101 }, (_, i) => `i${i}`).join(',')}`, { expect: 400 });
  }
  // the static files, and their revalidation
  for (const path of Object.keys(devDoc.paths).filter((p) => p.startsWith('/ui/'))) {
    const first = await call('GET', path, path, { expect: 200 });
    const again = await call('GET', path, path, { headers: { 'If-None-Match': first.headers.get('etag') }, expect: 304 });
    assert.equal(again.headers.get('content-length'), null, 'a 304 has no Content-Length');
    assert.equal(first.headers.get('content-length'), String(Buffer.byteLength(first.body)));
  }
  const all = Object.entries(devDoc.paths).flatMap(([p, ops]) => Object.keys(ops).map((m) => `${m} ${p}`));
  assert.deepEqual(all.filter((op) => !seen.has(op)), [], 'operations of the document never exercised');
});

test('real answers in JWT mode match the document (401 with WWW-Authenticate, bearer users)', async () => {
  const { call } = exerciser(jwt, jwtDoc);
  const res = await call('PUT', '/v1/items/{item}/{kind}', '/v1/items/p1/like', { expect: 401 });
  assert.equal(res.headers.get('www-authenticate'), 'Bearer');
  const auth = { Authorization: `Bearer ${makeJwt(SECRET, 'alice')}` };
  await call('PUT', '/v1/items/{item}/{kind}', '/v1/items/p1/like', { headers: auth, expect: 200 });
  await call('GET', '/v1/items/{item}', '/v1/items/p1', { headers: auth, expect: 200 });
  await call('GET', '/v1/items/{item}', '/v1/items/p1', { headers: { Authorization: 'Bearer x.y.z' }, expect: 401 });
  await call('GET', '/v1/admin/hot', '/v1/admin/hot', { headers: auth, expect: 403 });
  const adm = { Authorization: `Bearer ${makeJwt(SECRET, 'ops', { admin: true })}` };
  await call('GET', '/v1/admin/hot', '/v1/admin/hot', { headers: adm, expect: 200 });
});

test('an answer outside the document is caught (the check can fail)', () => {
  const v = new DocValidator(devDoc);
  assert.throws(() => v.check('GET', '/v1/items/{item}', 200, 'application/json', '{"item":"p","counts":{"like":1}}'));
  assert.throws(() => v.check('GET', '/v1/items/{item}', 418, 'application/json', '{}'));
  assert.throws(() => v.check('GET', '/v1/items/{item}', 400, 'application/problem+json',
    '{"type":"urn:tally:error:version-mismatch","title":"x","status":400}'));
});
