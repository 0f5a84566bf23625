// STAND-IN CAPTCHA: not a CAPTCHA provider and no protection at all. It
// plays a provider's widget where the real one cannot load (offline tests
// and demos), with the shape of Turnstile's explicit render: a box the
// user confirms, then callback(token). The app's /standin/siteverify
// passes every token it makes. Never use it where users sign in.
export function renderStandIn(el, { sitekey, callback }) {
  const box = document.createElement('div');
  box.className = 'standin';
  box.dataset.sitekey = sitekey;
  const title = document.createElement('strong');
  title.textContent = 'Stand-in CAPTCHA (offline test double, not a provider)';
  const button = document.createElement('button');
  button.type = 'button';
  button.id = 'standin-confirm';
  button.textContent = 'I am a person';
  button.addEventListener('click', () => {
    button.disabled = true;
    const nonce = crypto.getRandomValues(new Uint8Array(12));
    callback('standin-pass-' + Array.from(nonce, (b) => b.toString(16).padStart(2, '0')).join(''));
  });
  box.append(title, button);
  el.append(box);
}
