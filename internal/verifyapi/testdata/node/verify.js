// verify.js drives otpguard's Verify v2 routes with twilio-node, Twilio's
// own Node SDK (the version package.json pins), as an app written against
// Verify would: only the SDK's HTTP client sends to another address.
//
// TestTwilioNodeVerify in internal/verifyapi runs it, with what it needs
// in the environment, and holds every answer it saw to Twilio's OpenAPI
// document. Run it through that test:
//
//	go test -count=1 -run TestTwilioNodeVerify -v ./internal/verifyapi/
//
// It prints a line per step (never a code or a full number) and exits 1 at
// the first step that does not give what Verify would.
"use strict";

const assert = require("node:assert/strict");
const twilio = require("twilio");

// The SDK's requests and the code look-ups each give up after this long,
// so that a server that never answers ends the run rather than hangs it.
const timeoutMs = 10000;

function env(name) {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} is not set: run this through go test -run TestTwilioNodeVerify ./internal/verifyapi/`);
  }
  return v;
}

// Rebased sends every request of the SDK to otpguard: only the scheme and
// host of Twilio's URL change (https://verify.twilio.com/v2/... becomes
// http://127.0.0.1:port/v2/...). RequestClient is the SDK's HTTP client;
// the client takes one of our own as its httpClient option.
class Rebased extends twilio.RequestClient {
  constructor(base, opts) {
    super(opts);
    this.base = new URL(base);
  }

  request(opts) {
    const u = new URL(opts.uri);
    u.protocol = this.base.protocol;
    u.host = this.base.host;
    return super.request({ ...opts, uri: u.href });
  }
}

// code is the code of the last SMS to phone, as the test's fake SMS
// provider received it (the test serves it at CODES_URL).
async function code(phone) {
  const res = await fetch(`${env("CODES_URL")}?to=${encodeURIComponent(phone)}`, {
    signal: AbortSignal.timeout(timeoutMs),
  });
  const body = (await res.text()).trim();
  if (!res.ok) {
    throw new Error(`no code for the number: ${res.status} ${body}`);
  }
  return body;
}

// rejected is the error promise p rejects with, or fails the step.
async function rejected(p) {
  try {
    await p;
  } catch (err) {
    return err;
  }
  assert.fail("the call succeeded; want an error");
}

function step(name) {
  console.log(`ok  ${name}`);
}

async function main() {
  const base = env("VERIFY_URL");
  assert.equal(new URL(base).hostname, "127.0.0.1", "VERIFY_URL must be on the loopback address");
  const serviceSid = env("SERVICE_SID");
  const accountSid = env("ACCOUNT_SID");
  const phone = env("PHONE");
  const other = env("OTHER_PHONE");

  // An API key SID and its secret, with the account the answers name:
  // twilio-node wants accountSid beside an API key.
  const client = twilio(env("KEY_SID"), env("KEY_SECRET"), {
    accountSid,
    httpClient: new Rebased(base, { timeout: timeoutMs }),
  });
  const service = client.verify.v2.services(serviceSid);

  // Send.
  const v = await service.verifications.create({ to: phone, channel: "sms" });
  assert.match(v.sid, /^VE[0-9a-f]{32}$/);
  assert.equal(v.status, "pending");
  assert.equal(v.serviceSid, serviceSid);
  assert.equal(v.accountSid, accountSid);
  assert.equal(v.to, phone);
  assert.equal(v.channel, "sms");
  step("create: a pending sms verification");
  const right = await code(phone);
  assert.match(right, /^\d{6}$/, "the code the SMS carried");

  // A wrong code: 200, pending, not valid.
  const wrong = right === "000000" ? "111111" : "000000";
  let chk = await service.verificationChecks.create({ to: phone, code: wrong });
  assert.equal(chk.status, "pending");
  assert.equal(chk.valid, false);
  assert.equal(chk.sid, v.sid);
  step("check a wrong code: pending, not valid");

  // The right code, by the verification's SID.
  chk = await service.verificationChecks.create({ verificationSid: v.sid, code: right });
  assert.equal(chk.status, "approved");
  assert.equal(chk.valid, true);
  assert.equal(chk.to, phone);
  step("check the right code: approved");
  const got = await service.verifications(v.sid).fetch();
  assert.equal(got.status, "approved");
  step("fetch: approved");

  // Cancel a second verification.
  const second = await service.verifications.create({ to: other, channel: "sms" });
  assert.equal(second.status, "pending");
  const canceled = await service.verifications(second.sid).update({ status: "canceled" });
  assert.equal(canceled.status, "canceled");
  assert.equal(canceled.sid, second.sid);
  step("update Status=canceled: canceled");

  // A send in the number's cooldown: Verify's max send attempts, as the
  // SDK's own RestException.
  const err = await rejected(service.verifications.create({ to: other, channel: "sms" }));
  assert.ok(err instanceof twilio.RestException, `a ${err.constructor.name}, want a RestException: ${err}`);
  assert.equal(err.code, 60203);
  assert.equal(err.status, 429);
  assert.match(err.moreInfo, /^https:\/\//);
  step("create in the cooldown: RestException 60203, 429");

  // The service.
  const s = await service.fetch();
  assert.equal(s.sid, serviceSid);
  assert.equal(s.codeLength, 6);
  step("fetch the service");

  console.log("twilio-node: every step passed");
}

main().catch((err) => {
  console.error(`FAIL: ${err.stack || err}`);
  process.exitCode = 1;
});
