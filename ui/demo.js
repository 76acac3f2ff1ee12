// demo.js — the demo page (/ui/): who the viewer is, then the buttons. Development mode (the
// server's OpenAPI document says so): the user is a name typed here (X-User-Id); otherwise a JWT.
import { configure } from './tally-reactions.js';

const LABELS = { like: 'Like', dislike: 'Dislike', love: 'Love', haha: 'Haha', wow: 'Wow', sad: 'Sad', angry: 'Angry' };
const $ = (id) => document.getElementById(id);

function randomUser() {
  const b = crypto.getRandomValues(new Uint8Array(4));
  return `demo-${Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('')}`;
}

async function start() {
  const params = new URLSearchParams(location.search);
  let dev = true;
  try {
    const doc = await (await fetch('/v1/openapi.json')).json();
    dev = !!doc['x-tally']?.['development-mode'];
  } catch { /* keep the default */ }
  const user = params.get('user') || sessionStorage.getItem('tally-demo-user') || randomUser();
  const token = sessionStorage.getItem('tally-demo-token') || '';
  $('who-user').value = user;
  $('who-token').value = token;
  $('who-user-label').hidden = !dev;
  $('who-token-label').hidden = dev;
  $('who-mode').textContent = dev ? 'development mode: the user is the X-User-Id header' : 'users sign in with a JWT';
  const apply = () => {
    const u = $('who-user').value.trim();
    const t = $('who-token').value.trim();
    sessionStorage.setItem('tally-demo-user', u);
    sessionStorage.setItem('tally-demo-token', t);
    configure(dev ? { baseUrl: location.origin, userId: u, labels: LABELS }
      : { baseUrl: location.origin, getToken: async () => t || null, labels: LABELS });
  };
  $('who').addEventListener('submit', (e) => { e.preventDefault(); apply(); });
  apply();
  document.body.dataset.ready = 'true';
}

start();
