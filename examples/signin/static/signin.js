// The sign-in page: ask the app for a code; when the app hands back a
// challenge (otpguard's 428), solve it here, in the user's browser, with
// the widget the app names, and post the solution back. The app never
// solves a challenge itself.
import { renderStandIn } from './standin-captcha.js';

const $ = (sel) => document.querySelector(sel);
const status = $('#status');
let phone = '';

function say(state, text) {
  status.dataset.state = state;
  status.textContent = text;
}

async function post(path, body) {
  const res = await fetch(path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  let data = {};
  try {
    data = await res.json();
  } catch {
    // not JSON: the status says enough
  }
  return { code: res.status, data };
}

// sendCode asks for a code, with a challenge's solution when there is one.
async function sendCode(solution = {}) {
  say('sending', 'Sending…');
  let res;
  try {
    res = await post('/signin/code', { phone, ...solution });
  } catch {
    say('error', 'The network failed; try again.');
    return;
  }
  const { code, data } = res;
  if (code === 428 && data.challenge) {
    showChallenge(data.widget, data.challenge);
    return;
  }
  hideChallenge();
  if (code === 200) {
    say('sent', `Code sent to ${data.sent_to}.`);
    $('#code-form').hidden = false;
    $('#code').focus();
    return;
  }
  say('error', data.error || `Something went wrong (${code}).`);
}

function hideChallenge() {
  $('#challenge').hidden = true;
  $('#widget').replaceChildren();
}

// showChallenge renders the widget for the challenge the app handed over;
// each solution goes back to the app once.
function showChallenge(widget, challenge) {
  const box = $('#widget');
  box.replaceChildren();
  $('#challenge').hidden = false;
  say('challenge', 'Checking your browser…');
  let posted = false;
  const once = (solution) => {
    if (!posted) {
      posted = true;
      sendCode(solution);
    }
  };
  switch (widget) {
    case 'altcha': {
      // The challenge is given to the widget as JSON: it solves it without
      // fetching anything, and its payload is what otpguard checks.
      const el = document.createElement('altcha-widget');
      el.setAttribute('challenge', JSON.stringify(challenge));
      el.setAttribute('auto', 'onload');
      el.setAttribute('name', 'altcha');
      el.addEventListener('verified', (ev) => once({ altcha: ev.detail.payload }));
      box.append(el);
      return;
    }
    case 'turnstile':
      loadTurnstile().then((turnstile) => {
        turnstile.render(box, {
          sitekey: challenge.site_key,
          callback: (token) => once({ captcha_id: challenge.id, captcha_token: token }),
        });
      }, () => say('error', 'The CAPTCHA could not load; try again later.'));
      return;
    case 'standin':
      renderStandIn(box, {
        sitekey: challenge.site_key,
        callback: (token) => once({ captcha_id: challenge.id, captcha_token: token }),
      });
      return;
  }
  say('error', `Unknown challenge widget ${widget}.`);
}

let turnstile;
function loadTurnstile() {
  turnstile ||= new Promise((resolve, reject) => {
    const s = document.createElement('script');
    s.src = 'https://challenges.cloudflare.com/turnstile/v0/api.js?render=explicit';
    s.onload = () => resolve(window.turnstile);
    s.onerror = reject;
    document.head.append(s);
  });
  return turnstile;
}

$('#phone-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  phone = $('#phone').value.trim();
  $('#code-form').hidden = true;
  sendCode();
});

$('#code-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const { code, data } = await post('/signin/verify', { phone, code: $('#code').value.trim() });
  if (code === 200 && data.signed_in) {
    say('signed-in', 'Signed in.');
    $('#code-form').hidden = true;
    return;
  }
  say('error', data.error || `Something went wrong (${code}).`);
});
