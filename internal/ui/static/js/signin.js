// Sign-in for a server started with -tokens: the API answers 401 until
// the page sends a token with the read scope. The token is kept in this
// tab's sessionStorage (or, when "remember" is ticked, localStorage) and
// sent as Authorization: Bearer by api.js. It never goes in the URL, so it
// stays out of history, logs and Referer headers.
import { el } from './dom.js';

const KEY = 'laggard.token';

function stores() {
  const out = [];
  try { out.push(sessionStorage); } catch (e) { /* storage disabled */ }
  try { out.push(localStorage); } catch (e) { /* storage disabled */ }
  return out;
}

// token returns the stored token, or '' when there is none.
export function token() {
  for (const s of stores()) {
    const t = s.getItem(KEY);
    if (t) return t;
  }
  return '';
}

export function setToken(t, remember) {
  for (const s of stores()) s.removeItem(KEY);
  if (!t) return;
  try {
    (remember ? localStorage : sessionStorage).setItem(KEY, t);
  } catch (e) {
    memo = t; // storage disabled: keep it for this page only
  }
}

let memo = '';
export const currentToken = () => token() || memo;

export function signOut() {
  setToken('');
  memo = '';
  location.reload();
}

// One prompt at a time: every request that got 401 waits for the same
// sign-in and then retries.
let pending = null;

// signIn shows the sign-in dialog with the server's reason and resolves
// once the user has entered a token. It rejects with an AbortError when
// signal aborts (the page moved on).
export function signIn(reason, signal) {
  if (!pending) {
    pending = prompt(reason).finally(() => { pending = null; });
  }
  if (!signal) return pending;
  return new Promise((resolve, reject) => {
    const abort = () => reject(new DOMException('aborted', 'AbortError'));
    if (signal.aborted) return abort();
    signal.addEventListener('abort', abort, { once: true });
    pending.then(resolve, reject);
  });
}

function prompt(reason) {
  return new Promise((resolve) => {
    const input = el('input', { type: 'password', id: 'signin-token', name: 'token', autocomplete: 'current-password',
      required: true, spellcheck: 'false', 'aria-describedby': 'signin-why' });
    const remember = el('input', { type: 'checkbox', id: 'signin-remember' });
    const had = currentToken();
    const why = had ? 'The server refused the token: ' + reason : 'This laggard server requires a token with the read scope.';
    const dlg = el('dialog', { id: 'signin', class: 'signin', 'aria-labelledby': 'signin-title' },
      el('form', { method: 'dialog' },
        el('h2', { id: 'signin-title' }, 'Sign in'),
        el('p', { id: 'signin-why', class: 'muted' }, why),
        el('label', { for: 'signin-token' }, 'Token'), input,
        el('label', { class: 'toggle' }, remember, ' Remember on this device'),
        el('div', { class: 'signin-actions' }, el('button', { type: 'submit', class: 'primary' }, 'Sign in'))));
    dlg.addEventListener('cancel', (e) => e.preventDefault()); // nothing to show without a token
    dlg.querySelector('form').addEventListener('submit', (e) => {
      e.preventDefault();
      const t = input.value.trim();
      if (!t) return;
      setToken(t, remember.checked);
      if (!token()) memo = t;
      dlg.close();
      dlg.remove();
      showSignOut();
      resolve(t);
    });
    document.body.append(dlg);
    if (typeof dlg.showModal === 'function') dlg.showModal();
    else dlg.setAttribute('open', '');
    input.focus();
  });
}

// showSignOut puts a "Sign out" button in the top bar while a token is
// stored.
function showSignOut() {
  const bar = document.querySelector('.topbar-right');
  if (!bar || document.getElementById('signout') || !currentToken()) return;
  bar.append(el('button', { id: 'signout', class: 'signout', type: 'button', title: 'Forget the token', onclick: signOut }, 'Sign out'));
}

if (typeof document !== 'undefined') {
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', showSignOut);
  else showSignOut();
}
