// Makes the test vectors for the kinds paddle, twilio, square, zoom and
// twitch: tests/vectors/<kind>.json. The Rust tests read those committed
// files (tests/it/vectors.rs and each verifier's unit tests); nothing here
// runs at test time.
//
// Where the provider ships an SDK, the SDK decides: Twilio's signatures are
// made by twilio-node's own getExpectedTwilioSignature, and every case of
// paddle, twilio and square records what the SDK's verifier answers
// (`sdk_valid`), checked against what hookbox must answer (`expect`); a
// disagreement aborts the run unless the case names why hookbox is
// deliberately different (`differs`). Paddle and Square ship verifiers but
// no signers, so their MACs are made here with node:crypto and then
// accepted or refused by the SDK. Zoom and Twitch publish no SDK verifier:
// their cases follow the worked algorithm in their docs (links in
// src/receive/zoom.rs and twitch.rs).
//
// Regenerate (needs network for npm; package.json pins the SDK versions):
//   cd tests/vectors && npm install && node make-partA.mjs
// Timestamps are taken from the clock when the script runs; each file
// records that time as `now`, and the tests check against it.

import crypto from "node:crypto";
import fs from "node:fs";
import { createRequire } from "node:module";
import querystring from "node:querystring";

const require = createRequire(import.meta.url);
const { WebhooksValidator, NodeRuntime } = require("@paddle/paddle-node-sdk");
const { WebhooksHelper } = require("square");
const twilio = require("twilio");

// The Paddle SDK's verifier needs a runtime's crypto; `new Paddle(..)`
// would set it, and this is what that does in Node.
NodeRuntime.initialize();

// Read from disk: some packages do not export their package.json.
const version = (name) =>
  JSON.parse(fs.readFileSync(new URL(`./node_modules/${name}/package.json`, import.meta.url))).version;
const now = Math.floor(Date.now() / 1000);
const hmacHex = (key, data) => crypto.createHmac("sha256", key).update(data).digest("hex");
const hmacB64 = (key, data) => crypto.createHmac("sha256", key).update(data).digest("base64");
const sha256Hex = (data) => crypto.createHash("sha256").update(data).digest("hex");

const ok = (delivery_id, event_type) => ({ status: 202, delivery_id, event_type });
const refused = (error) => ({ status: 401, error });

function write(kind, file) {
  for (const c of file.cases) {
    if (c.sdk_valid === undefined) continue;
    const accepted = c.expect.status < 300;
    if (accepted !== c.sdk_valid && !c.differs) {
      throw new Error(`${kind}/${c.name}: the SDK says ${c.sdk_valid}, hookbox must say ${accepted}`);
    }
  }
  const out = { kind, ...file };
  fs.writeFileSync(new URL(`./${kind}.json`, import.meta.url), JSON.stringify(out, null, 2) + "\n");
  console.log(`${kind}.json: ${file.cases.length} cases`);
}

// ------------------------------------------------------------- paddle ---

async function paddle() {
  const secret = "pdl_ntfset_01hv8wfb2zvcxmv1bnkpgxqfa8_hookboxVectorSecret0000";
  const old = "pdl_ntfset_01hv8wfb2zvcxmv1bnkpgxqfa8_previousSecret00000000";
  const body = JSON.stringify({
    event_id: "evt_01hv8x2acma2gz4v8adqb3mycf",
    event_type: "transaction.completed",
    occurred_at: "2024-04-12T10:18:49.621022Z",
    notification_id: "ntf_01hv8x2af4ktqcmxcfgjwnfk6y",
    data: { id: "txn_01hv8wptq8987qeep44cyrewp9", status: "completed", currency_code: "USD" },
  });
  const sign = (key, ts, b = body) => `ts=${ts};h1=${hmacHex(key, `${ts}:${b}`)}`;
  const validator = new WebhooksValidator();
  const sdk = async (b, header, key = secret) => {
    try {
      return await validator.isValidSignature(b, key, header);
    } catch {
      return false; // the SDK throws on a header it cannot parse
    }
  };
  const headers = (sig) => (sig === null ? {} : { "paddle-signature": sig, "content-type": "application/json" });
  const cases = [];
  const add = async (name, sig, b, expect, extra = {}) =>
    cases.push({ name, headers: headers(sig), body: b, sdk_valid: await sdk(b, sig ?? ""), expect, ...extra });
  const id = "evt_01hv8x2acma2gz4v8adqb3mycf";
  await add("valid", sign(secret, now), body, ok(id, "transaction.completed"), { resend: true });
  await add("tampered body", sign(secret, now), body.replace("completed", "canceled"), refused("invalid_signature"));
  await add("wrong secret", sign("pdl_ntfset_someone_else", now), body, refused("invalid_signature"));
  await add("signed timestamp changed", sign(secret, now).replace(`ts=${now}`, `ts=${now - 1}`), body, refused("invalid_signature"));
  await add("expired, an hour old", sign(secret, now - 3600), body, refused("timestamp_out_of_tolerance"));
  await add("expired, six seconds old (the SDK's 5 s window)", sign(secret, now - 6), body, refused("timestamp_out_of_tolerance"));
  // Four, not five: the SDK compares milliseconds with ts + 5 s, so at five
  // its verdict would depend on when in the second this script ran.
  // Each accepted case is its own event, so none is a duplicate of another.
  const other = (n) => body.replace(id, `${id}${n}`);
  await add("four seconds old, inside the window", sign(secret, now - 4, other(1)), other(1), ok(`${id}1`, "transaction.completed"));
  await add("an hour in the future", sign(secret, now + 3600), body, refused("timestamp_out_of_tolerance"), {
    differs: "the SDK refuses only old timestamps; hookbox refuses both directions",
  });
  await add("rotation: old and new h1, new last", `ts=${now};h1=${hmacHex(old, `${now}:${other(2)}`)};h1=${hmacHex(secret, `${now}:${other(2)}`)}`, other(2), ok(`${id}2`, "transaction.completed"));
  await add("rotation: old and new h1, new first", `ts=${now};h1=${hmacHex(secret, `${now}:${other(3)}`)};h1=${hmacHex(old, `${now}:${other(3)}`)}`, other(3), ok(`${id}3`, "transaction.completed"), {
    differs: "the SDK keeps only the last h1; hookbox tries each (Paddle signs once per active secret while one is rotated)",
  });
  await add("malformed: h1 not hex", `ts=${now};h1=${"zz".repeat(32)}`, body, refused("malformed_signature"));
  await add("malformed: no h1", `ts=${now}`, body, refused("malformed_signature"));
  await add("malformed: ts with trailing text", sign(secret, now).replace(`ts=${now}`, `ts=${now}abc`), body, refused("malformed_timestamp"), {
    differs: "the SDK's parseInt reads `123abc` as 123; hookbox takes plain digits only",
  });
  await add("malformed: comma instead of semicolon", sign(secret, now).replace(";", ","), body, refused("malformed_signature"));
  await add("missing timestamp", `h1=${hmacHex(secret, `${now}:${body}`)}`, body, refused("missing_timestamp"));
  await add("missing signature header", null, body, refused("missing_signature"));
  write("paddle", {
    sdk: { "@paddle/paddle-node-sdk": version("@paddle/paddle-node-sdk") },
    made_by: "MACs by node:crypto as Paddle documents (ts:body, hex); verdicts by WebhooksValidator.isValidSignature",
    now,
    secrets: [secret, old],
    cases,
  });
}

// ------------------------------------------------------------- twilio ---

function twilioVectors() {
  const token = "a3f1c2e4b5d6978812345678abcdef90";
  const sharedKey = "webhooks_sharedkey_secret_hookbox_0001";
  // The URL as Twilio calls it: a reverse proxy forwards /webhooks/twilio
  // on hooks.example.com to hookbox's /hooks/twilio over plain HTTP.
  const publicUrl = "https://hooks.example.com/webhooks/twilio";
  const form = [
    ["MessageSid", "SM9f3a4ac5a2b26a5e1a6d2b4e6a1f8c3d"],
    ["AccountSid", "AC0123456789abcdef0123456789abcdef"],
    ["From", "+14155550100"],
    ["To", "+14155550199"],
    ["Body", "Hello, it's me & you: 100% ok"],
    ["MessageStatus", "delivered"],
    ["MediaUrl0", "https://api.twilio.com/x?a=1"],
  ];
  const formBody = form.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v).replace(/%20/g, "+")}`).join("&");
  const paramsOf = (b) => ({ ...querystring.parse(b) });
  const sig = (key, url, params, algorithm) => twilio.getExpectedTwilioSignature(key, url, params, algorithm);
  const idem = "RQ3e8b4a2f7c6d5e4f3a2b1c0d9e8f7a6b-1";
  // The dedupe key is the signature's (src/receive/twilio.rs): the
  // idempotency token is not signed. A valid case names its event type
  // only; its delivery id is filled in from the signature it gets.
  const valid = (event_type) => ({ status: 202, event_type });
  const keyed = (expect, s) =>
    expect.status === 202
      ? { status: 202, delivery_id: `sig:${sha256Hex(Buffer.from(s, "base64"))}`, event_type: expect.event_type }
      : expect;
  const cases = [];
  const formCase = (name, { key = token, signUrl, query = null, body = formBody, headers = {}, algorithm, sigOverride, expect, ...extra }) => {
    const url = query === null ? publicUrl : `${publicUrl}?${query}`;
    const s = sigOverride === undefined ? sig(key, signUrl ?? url, paramsOf(body), algorithm) : sigOverride;
    const h = { "content-type": "application/x-www-form-urlencoded", ...headers };
    if (s !== null) h["x-twilio-signature"] = s;
    const sdkKey = algorithm ? sharedKey : token;
    const sdk_valid = s !== null && twilio.validateRequest(sdkKey, s, url, paramsOf(body), algorithm);
    cases.push({ name, query, headers: h, body, sdk_valid, expect: keyed(expect, s), ...extra });
  };
  formCase("valid form callback", { headers: { "i-twilio-idempotency-token": idem }, expect: valid("delivered"), resend: true });
  formCase("valid, with a query Twilio was given", { query: "tenant=7&note=it%27s", headers: { "i-twilio-idempotency-token": `${idem}-q` }, expect: valid("delivered") });
  formCase("valid, repeated parameter", {
    body: `${formBody}&MediaUrl0=https%3A%2F%2Fapi.twilio.com%2Fy`,
    headers: { "i-twilio-idempotency-token": `${idem}-r` },
    expect: valid("delivered"),
  });
  formCase("valid, no idempotency token", { body: `${formBody}&SmsSid=SM1`, expect: valid("delivered") });
  formCase("valid, signed with the explicit :443 port", { signUrl: "https://hooks.example.com:443/webhooks/twilio", headers: { "i-twilio-idempotency-token": `${idem}-p` }, expect: valid("delivered") });
  formCase("valid, Webhooks Rule SharedKey with HMAC_SHA256", {
    key: sharedKey,
    algorithm: "HMAC_SHA256",
    headers: { "x-twilio-webhooks-signature-settings": "key=webhooks_sharedkey_1,algorithm=HMAC_SHA256", "i-twilio-idempotency-token": `${idem}-s` },
    expect: valid("delivered"),
  });
  // Twilio's back end does not always sign the URL byte for byte as it
  // calls it; the SDK also tries the WHATWG-normalised URL and Node's
  // legacy querystring re-encoding of it. Both cases are signed by the
  // SDK's signer over the other spelling and must pass the SDK's verifier.
  formCase("valid, signed over the normalised query (' as %27)", {
    query: "note=it's",
    signUrl: `${publicUrl}?note=it%27s`,
    headers: { "i-twilio-idempotency-token": `${idem}-n` },
    expect: valid("delivered"),
  });
  formCase("valid, signed over the legacy querystring form (%27 as ')", {
    query: "note=it%27s&2=b&1=a",
    signUrl: `${publicUrl}?1=a&2=b&note=it's`,
    headers: { "i-twilio-idempotency-token": `${idem}-l` },
    expect: valid("delivered"),
  });
  formCase("tampered parameter", { body: formBody.replace("delivered", "failed"), sigOverride: sig(token, publicUrl, paramsOf(formBody)), expect: refused("invalid_signature") });
  formCase("added parameter", { body: `${formBody}&Extra=1`, sigOverride: sig(token, publicUrl, paramsOf(formBody)), expect: refused("invalid_signature") });
  formCase("wrong auth token", { key: "00000000000000000000000000000000", expect: refused("invalid_signature") });
  formCase("signed for the URL hookbox sees behind the proxy, not the public one", {
    signUrl: "http://127.0.0.1:8080/hooks/twilio",
    expect: refused("invalid_signature"),
    sdk_note: "the SDK was given the public URL, as hookbox is",
  });
  formCase("query changed after signing", { query: "tenant=8", sigOverride: sig(token, `${publicUrl}?tenant=7`, paramsOf(formBody)), expect: refused("invalid_signature") });
  formCase("malformed: signature not base64", { sigOverride: "not base64!", expect: refused("malformed_signature") });
  formCase("malformed: unsupported algorithm", {
    headers: { "x-twilio-webhooks-signature-settings": "key=k,algorithm=HMAC_SHA512" },
    algorithm: undefined,
    expect: refused("malformed_signature"),
    differs: "the SDK is given no algorithm here (HMAC_SHA1, which the MAC is); hookbox reads the header and refuses an algorithm it does not know, as the SDK's webhook() middleware does",
  });
  formCase("missing signature", { sigOverride: null, expect: refused("missing_signature") });

  // JSON callbacks: bodySHA256 in the query, only the URL signed.
  const json = JSON.stringify({ EventType: "com.twilio.messaging.message.delivered", MessageSid: "SM9f3a" });
  const jsonCase = (name, { body = json, hashOf = json, key = token, expect, ...extra }) => {
    const query = `bodySHA256=${sha256Hex(hashOf)}`;
    const url = `${publicUrl}?${query}`;
    const s = sig(key, url, {});
    cases.push({
      name,
      query,
      headers: { "content-type": "application/json", "x-twilio-signature": s, "i-twilio-idempotency-token": `${idem}-j` },
      body,
      sdk_valid: twilio.validateRequestWithBody(token, s, url, body),
      expect: keyed(expect, s),
      ...extra,
    });
  };
  jsonCase("valid JSON callback (bodySHA256)", { expect: valid("com.twilio.messaging.message.delivered") });
  jsonCase("JSON body changed (hash no longer matches)", { body: json.replace("SM9f3a", "SM0000"), expect: refused("invalid_signature") });
  jsonCase("JSON, wrong auth token", { key: "ffffffffffffffffffffffffffffffff", expect: refused("invalid_signature") });
  write("twilio", {
    sdk: { twilio: version("twilio") },
    made_by: "signatures by twilio.getExpectedTwilioSignature; verdicts by twilio.validateRequest / validateRequestWithBody with the public URL",
    public_url: publicUrl,
    not_applicable: { expired: "Twilio signs no timestamp" },
    now,
    secrets: [token, sharedKey],
    cases,
  });
}

// ------------------------------------------------------------- square ---

async function square() {
  const key = "Qx7p0mVZbqg3bq2d1EXAMPLEhookbox";
  const publicUrl = "https://hooks.example.com/hooks/square";
  const body = JSON.stringify({
    merchant_id: "6SSW7HV8K2ST5",
    type: "payment.updated",
    event_id: "13b867cf-db3d-4b1c-90b6-2f32a9d78124",
    created_at: "2024-04-12T10:18:49Z",
    data: { type: "payment", id: "KkAkhdMsgzn59SM8A89WgKwekxLZY", object: { payment: { status: "COMPLETED" } } },
  });
  const sdk = async (b, header, url) => {
    try {
      return await WebhooksHelper.verifySignature({ requestBody: b, signatureHeader: header, signatureKey: key, notificationUrl: url });
    } catch {
      return false;
    }
  };
  const cases = [];
  const add = async (name, { url = publicUrl, signUrl = url, query = null, b = body, signKey = key, sig, expect, ...extra }) => {
    const full = query === null ? url : `${url}?${query}`;
    const signFull = query === null ? signUrl : `${signUrl}?${query}`;
    const s = sig === undefined ? hmacB64(signKey, signFull + b) : sig;
    const headers = { "content-type": "application/json", "square-version": "2024-04-17" };
    if (s !== null) headers["x-square-hmacsha256-signature"] = s;
    cases.push({ name, query, headers, body: b, sdk_valid: s !== null && (await sdk(b, s, full)), expect, ...extra });
  };
  const id = "13b867cf-db3d-4b1c-90b6-2f32a9d78124";
  await add("valid", { expect: ok(id, "payment.updated"), resend: true });
  await add("valid, URL with a query", { query: "env=prod", b: body.replace(id, `${id}-q`), expect: ok(`${id}-q`, "payment.updated") });
  await add("tampered body", { b: body.replace("COMPLETED", "FAILED"), sig: hmacB64(key, publicUrl + body), expect: refused("invalid_signature") });
  await add("wrong signature key", { signKey: "some-other-key", expect: refused("invalid_signature") });
  await add("signed for the URL hookbox sees behind the proxy, not the public one", {
    signUrl: "http://127.0.0.1:8080/hooks/square",
    expect: refused("invalid_signature"),
  });
  await add("signed for a URL with a trailing slash", { signUrl: `${publicUrl}/`, expect: refused("invalid_signature") });
  await add("malformed: unpadded base64", { sig: hmacB64(key, publicUrl + body).replace(/=+$/, ""), expect: refused("malformed_signature") });
  // 64 hex digits are also valid base64, of 48 bytes: the wrong length.
  await add("hex instead of base64", { sig: hmacHex(key, publicUrl + body), expect: refused("invalid_signature") });
  await add("missing signature", { sig: null, expect: refused("missing_signature") });
  write("square", {
    sdk: { square: version("square") },
    made_by: "MACs by node:crypto as Square documents (notification URL + body, base64); verdicts by WebhooksHelper.verifySignature with the public URL",
    public_url: publicUrl,
    not_applicable: { expired: "Square signs no timestamp" },
    now,
    secrets: [key],
    cases,
  });
}

// --------------------------------------------------------------- zoom ---

function zoom() {
  // Zoom's worked algorithm ("Verify webhook events", "Validate your
  // webhook endpoint"): v0= + hex HMAC-SHA256(secret, `v0:${ts}:${body}`);
  // encryptedToken = hex HMAC-SHA256(secret, plainToken).
  const secret = "Wq3wBSKWQ9mH2iyQ0GyF1A";
  const sign = (key, ts, b) => `v0=${hmacHex(key, `v0:${ts}:${b}`)}`;
  const eventTs = now * 1000 + 123;
  const body = JSON.stringify({
    event: "meeting.started",
    event_ts: eventTs,
    payload: { account_id: "AAAAAABBBB", object: { uuid: "czLF6FFFoQOKgAB99DlDb9g==", id: 85226580010, topic: "Standup" } },
  });
  const validation = JSON.stringify({ payload: { plainToken: "qgg8vlvZRS6UYooatFL8Aw" }, event_ts: eventTs, event: "endpoint.url_validation" });
  const cases = [];
  const add = (name, { b = body, ts = now, sig, expect, ...extra }) => {
    const headers = { "content-type": "application/json; charset=utf-8" };
    if (ts !== null) headers["x-zm-request-timestamp"] = String(ts);
    const s = sig === undefined ? sign(secret, ts, b) : sig;
    if (s !== null) headers["x-zm-signature"] = s;
    cases.push({ name, headers, body: b, expect, ...extra });
  };
  const id = `meeting.started:${eventTs}:czLF6FFFoQOKgAB99DlDb9g==`;
  add("valid", { expect: ok(id, "meeting.started"), resend: true });
  add("endpoint.url_validation handshake", {
    b: validation,
    expect: {
      status: 200,
      handshake: { content_type: "application/json", json: { plainToken: "qgg8vlvZRS6UYooatFL8Aw", encryptedToken: hmacHex(secret, "qgg8vlvZRS6UYooatFL8Aw") } },
    },
  });
  add("handshake with a wrong signature", { b: validation, sig: sign("not-the-secret", now, validation), expect: refused("invalid_signature") });
  add("tampered body", { b: body.replace("Standup", "Standdown"), sig: sign(secret, now, body), expect: refused("invalid_signature") });
  add("wrong secret", { sig: sign("not-the-secret", now, body), expect: refused("invalid_signature") });
  add("signed timestamp changed", { ts: now + 1, sig: sign(secret, now, body), expect: refused("invalid_signature") });
  add("a day old: no window, keyed on the event", {
    b: body.replace(`"uuid":"czLF6FFFoQOKgAB99DlDb9g=="`, `"uuid":"old"`),
    ts: now - 86400,
    expect: ok(`meeting.started:${eventTs}:old`, "meeting.started"),
    note: "Zoom documents no tolerance and retries hours later; replays are duplicates of the event key",
  });
  add("malformed: v1 prefix", { sig: sign(secret, now, body).replace("v0=", "v1="), expect: refused("malformed_signature") });
  add("malformed: timestamp in RFC 3339", { ts: "2024-04-12T10:18:49Z", expect: refused("malformed_timestamp") });
  add("missing timestamp", { ts: null, sig: sign(secret, now, body), expect: refused("missing_timestamp") });
  add("missing signature", { sig: null, expect: refused("missing_signature") });
  write("zoom", {
    sdk: {},
    made_by: "Zoom's documented algorithm (developers.zoom.us/docs/api/webhooks), node:crypto",
    not_applicable: { expired: "Zoom documents no tolerance; see the 'a day old' case" },
    now,
    secrets: [secret],
    cases,
  });
}

// ------------------------------------------------------------- twitch ---

function twitch() {
  // Twitch's worked example ("Verifying the event message"): sha256= + hex
  // HMAC-SHA256(secret, id + timestamp + body); refuse messages older than
  // 10 minutes; answer webhook_callback_verification with the challenge as
  // text/plain.
  const secret = "s3cr3t-twitch-hookbox-0123456789";
  const rfc3339 = (secs) => new Date(secs * 1000).toISOString().replace(/\.\d{3}Z$/, ".634234626Z");
  const sign = (key, id, ts, b) => `sha256=${hmacHex(key, id + ts + b)}`;
  const subscription = { id: "f1c2a387-161a-49f9-a165-0f21d7a4e1c4", status: "enabled", type: "channel.follow", version: "2", cost: 0, condition: { broadcaster_user_id: "1337", moderator_user_id: "1337" }, transport: { method: "webhook", callback: "https://hooks.example.com/hooks/twitch" }, created_at: "2019-11-16T10:11:12.634234626Z" };
  const body = JSON.stringify({ subscription, event: { user_id: "1234", user_login: "cool_user", broadcaster_user_id: "1337", followed_at: "2020-07-15T18:16:11.17106713Z" } });
  const verification = JSON.stringify({ challenge: "pogchamp-kappa-360noscope-vohiyo", subscription: { ...subscription, status: "webhook_callback_verification_pending" } });
  const revocation = JSON.stringify({ subscription: { ...subscription, status: "authorization_revoked" } });
  const cases = [];
  const add = (name, { id = "befa7b53-d79d-478f-86b9-120f112b044e", type = "notification", b = body, ts = rfc3339(now), sig, expect, ...extra }) => {
    const headers = { "content-type": "application/json", "twitch-eventsub-message-type": type, "twitch-eventsub-subscription-type": "channel.follow", "twitch-eventsub-subscription-version": "2" };
    if (id !== null) headers["twitch-eventsub-message-id"] = id;
    if (ts !== null) headers["twitch-eventsub-message-timestamp"] = ts;
    const s = sig === undefined ? sign(secret, id ?? "", ts ?? "", b) : sig;
    if (s !== null) headers["twitch-eventsub-message-signature"] = s;
    cases.push({ name, headers, body: b, expect, ...extra });
  };
  const id = "befa7b53-d79d-478f-86b9-120f112b044e";
  add("valid notification", { expect: ok(id, "channel.follow"), resend: true });
  add("webhook_callback_verification handshake", {
    id: "e76c6bd4-55c9-4987-8304-da1588d8988b",
    type: "webhook_callback_verification",
    b: verification,
    expect: { status: 200, handshake: { content_type: "text/plain", text: "pogchamp-kappa-360noscope-vohiyo" } },
  });
  add("handshake with a wrong signature", {
    id: "e76c6bd4-55c9-4987-8304-da1588d8988b",
    type: "webhook_callback_verification",
    b: verification,
    sig: sign("not-the-secret", "e76c6bd4-55c9-4987-8304-da1588d8988b", rfc3339(now), verification),
    expect: refused("invalid_signature"),
  });
  add("valid revocation", { id: "84c1e79a-2a4b-4c13-ba0b-4312293e9308", type: "revocation", b: revocation, expect: ok("84c1e79a-2a4b-4c13-ba0b-4312293e9308", "channel.follow") });
  add("tampered body", { b: body.replace("cool_user", "evil_user"), sig: sign(secret, id, rfc3339(now), body), expect: refused("invalid_signature") });
  add("wrong secret", { sig: sign("not-the-secret", id, rfc3339(now), body), expect: refused("invalid_signature") });
  add("message id changed", { id: "befa7b53-d79d-478f-86b9-120f112b0440", sig: sign(secret, id, rfc3339(now), body), expect: refused("invalid_signature") });
  add("expired: eleven minutes old", { ts: rfc3339(now - 660), expect: refused("timestamp_out_of_tolerance") });
  add("nine minutes old: inside Twitch's ten", { id: "0e6cbd3c-11a4-4a0f-a1b1-5f5b4a1e2d3c", ts: rfc3339(now - 540), expect: ok("0e6cbd3c-11a4-4a0f-a1b1-5f5b4a1e2d3c", "channel.follow") });
  add("malformed: no sha256= prefix", { sig: sign(secret, id, rfc3339(now), body).slice(7), expect: refused("malformed_signature") });
  add("malformed: unix-seconds timestamp", { ts: String(now), expect: refused("malformed_timestamp") });
  add("missing timestamp", { ts: null, expect: refused("missing_timestamp") });
  add("missing signature", { sig: null, expect: refused("missing_signature") });
  write("twitch", {
    sdk: {},
    made_by: "Twitch's documented example (dev.twitch.tv/docs/eventsub/handling-webhook-events), node:crypto",
    now,
    secrets: [secret],
    cases,
  });
}

await paddle();
twilioVectors();
await square();
zoom();
twitch();
