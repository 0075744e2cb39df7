// Makes tests/vectors/{linear,discord,sendgrid,mailgun,meta}.json: requests
// signed as each provider signs, each case's verdict taken from the
// provider's own SDK where one verifies (or from the provider's documented
// algorithm, written out below as documented), next to what hookbox must
// answer. tests/it/vectors_b.rs replays every case through the real server;
// the suite reads the committed JSON and never needs npm.
//
// Regenerate (network needed once, for npm):
//   tests/vectors/make-partB.sh
// which installs the pinned SDKs into a temporary directory and runs this
// file with NODE_PATH pointing there.
//
// Keys are derived from fixed seeds so that a regeneration changes only the
// ECDSA signatures (random by nature). None of them is used anywhere else.

import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const require = createRequire(path.join(process.env.NODE_PATH ?? ".", "x.js"));
const { LinearWebhookClient } = await import(
  path.join(process.env.NODE_PATH, "@linear/sdk/dist/webhooks/index.mjs")
);
const { verifyKey } = require("discord-interactions");
const { EventWebhook } = require("@sendgrid/eventwebhook");

const pkg = (name) =>
  JSON.parse(fs.readFileSync(path.join(process.env.NODE_PATH, name, "package.json"))).version;
const OUT = path.dirname(new URL(import.meta.url).pathname);

/// Verification time of every vector: 2026-01-01T00:00:00Z.
const NOW_MS = 1767225600000;
const NOW = NOW_MS / 1000;

const hmacHex = (key, ...parts) => {
  const h = crypto.createHmac("sha256", key);
  for (const p of parts) h.update(p);
  return h.digest("hex");
};
const seed = (label) => crypto.createHash("sha256").update(label).digest();

function write(kind, sdk, source, cases) {
  const file = path.join(OUT, `${kind}.json`);
  const doc = {
    kind,
    generated_by: "tests/vectors/make-partB.mjs",
    sdk,
    node: process.version,
    now_ms: NOW_MS,
    source,
    cases,
  };
  fs.writeFileSync(file, JSON.stringify(doc, null, 2) + "\n");
  console.log(`${file}: ${cases.length} cases`);
}

const accepted = (delivery_id, event_type) => ({ status: 202, delivery_id, event_type });
const refused = (error) => ({ status: 401, error });
const bodySha = (body) => "sha256:" + crypto.createHash("sha256").update(body).digest("hex");

// ------------------------------------------------------------- linear ---

async function linear() {
  const secret = "lin_wh_" + seed("linear-new").toString("hex").slice(0, 40);
  const old = "lin_wh_" + seed("linear-old").toString("hex").slice(0, 40);
  // The SDK verifies against Date.now(); pin it to the vectors' time.
  const realNow = Date.now;
  Date.now = () => NOW_MS;
  const sdkVerdict = (body, sig) => {
    for (const s of [secret, old]) {
      try {
        if (new LinearWebhookClient(s).verify(Buffer.from(body), sig)) return "accept";
      } catch (_) {}
    }
    return "reject";
  };
  const payload = (ts, extra = {}) =>
    JSON.stringify({
      action: "create",
      type: "Issue",
      createdAt: "2025-12-31T23:59:55.000Z",
      data: { id: "2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9", title: "Vectors" },
      url: "https://linear.app/acme/issue/ENG-1",
      organizationId: "e6a3c7a5-0000-4000-8000-000000000001",
      webhookId: "000d5b74-0000-4000-8000-000000000002",
      ...(ts === undefined ? {} : { webhookTimestamp: ts }),
      ...extra,
    });
  // The dedupe key (src/receive/linear.rs): the body's top-level members
  // but webhookTimestamp, sorted by name, values as sent; Linear-Delivery
  // is not signed.
  const payloadKey = (body) => {
    const members = JSON.parse(body);
    const kept = Object.keys(members)
      .filter((k) => k !== "webhookTimestamp")
      .sort()
      .map((k) => `${JSON.stringify(k)}:${JSON.stringify(members[k])}`);
    return bodySha(`{${kept.join(",")}}`);
  };
  const cases = [];
  const add = (name, delivery, body, sig, expect, note) => {
    const headers = { "Linear-Delivery": delivery, "Linear-Event": "Issue", "Content-Type": "application/json" };
    if (sig !== undefined) headers["Linear-Signature"] = sig;
    cases.push({ name, headers, body, sdk: sdkVerdict(body, sig), expect, ...(note ? { sdk_differs: note } : {}) });
  };
  const fresh = payload(NOW_MS - 5000);
  add("valid", "d-valid", fresh, hmacHex(secret, fresh), accepted(payloadKey(fresh), "Issue.create"));
  const oldSigned = payload(NOW_MS - 3000, { action: "update" });
  add("valid_old_secret_rotation", "d-rotated", oldSigned, hmacHex(old, oldSigned), accepted(payloadKey(oldSigned), "Issue.update"));
  add("tampered_body", "d-tampered", fresh.replace("Vectors", "Vectorz"), hmacHex(secret, fresh), refused("invalid_signature"));
  add("wrong_secret", "d-wrong", fresh, hmacHex("lin_wh_wrong", fresh), refused("invalid_signature"));
  const stale = payload(NOW_MS - 61_000);
  add("expired_61s", "d-stale", stale, hmacHex(secret, stale), refused("timestamp_out_of_tolerance"));
  const future = payload(NOW_MS + 61_000);
  add("future_61s", "d-future", future, hmacHex(secret, future), refused("timestamp_out_of_tolerance"));
  // 59 s, not 60: the replaying server's clock runs on while it replays
  // (the exact edge is a unit test in src/receive/linear.rs).
  // Another issue: the same payload as "valid" would be its duplicate.
  const edge = payload(NOW_MS - 59_000, { url: "https://linear.app/acme/issue/ENG-2" });
  add("within_60s", "d-edge", edge, hmacHex(secret, edge), accepted(payloadKey(edge), "Issue.create"));
  const noTs = payload(undefined);
  add("missing_body_timestamp", "d-no-ts", noTs, hmacHex(secret, noTs), refused("missing_timestamp"));
  const textTs = payload(String(NOW_MS));
  add("string_body_timestamp", "d-text-ts", textTs, hmacHex(secret, textTs), refused("malformed_timestamp"));
  add("uppercase_hex", "d-upper", fresh, hmacHex(secret, fresh).toUpperCase(), refused("invalid_signature"));
  add("prefixed_sha256", "d-prefixed", fresh, "sha256=" + hmacHex(secret, fresh), refused("malformed_signature"));
  add("truncated", "d-truncated", fresh, hmacHex(secret, fresh).slice(0, 62), refused("malformed_signature"));
  add("missing_signature", "d-unsigned", fresh, undefined, refused("missing_signature"));
  Date.now = realNow;
  write("linear", { "@linear/sdk": pkg("@linear/sdk") }, { secrets: [secret, old], tolerance: "60s" }, cases);
}

// ------------------------------------------------------------ discord ---

function ed25519(label) {
  const der = Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), seed(label)]);
  const privateKey = crypto.createPrivateKey({ key: der, format: "der", type: "pkcs8" });
  const spki = crypto.createPublicKey(privateKey).export({ type: "spki", format: "der" });
  return { privateKey, publicHex: spki.subarray(spki.length - 32).toString("hex") };
}

async function discord() {
  const app = ed25519("discord-app");
  const rotated = ed25519("discord-app-second");
  const stranger = ed25519("discord-stranger");
  const sign = (key, ts, body) =>
    crypto.sign(null, Buffer.concat([Buffer.from(ts), Buffer.from(body)]), key.privateKey).toString("hex");
  const cases = [];
  const add = async (name, ts, body, sig, expect, note) => {
    const headers = { "Content-Type": "application/json" };
    if (ts !== undefined) headers["X-Signature-Timestamp"] = ts;
    if (sig !== undefined) headers["X-Signature-Ed25519"] = sig;
    let sdk = "reject";
    for (const key of [app, rotated]) {
      if (await verifyKey(body, sig ?? "", ts ?? "", key.publicHex)) sdk = "accept";
    }
    cases.push({ name, headers, body, sdk, expect, ...(note ? { sdk_differs: note } : {}) });
  };
  const ts = String(NOW - 2);
  const command = JSON.stringify({
    id: "1331111111111111111",
    application_id: "1330000000000000000",
    type: 2,
    token: "aW50ZXJhY3Rpb246MTMzMTExMTExMTExMTExMTExMTp2ZWN0b3Jz",
    version: 1,
    data: { id: "1332222222222222222", name: "ping", type: 1 },
  });
  const ping = JSON.stringify({
    id: "1331111111111111112",
    application_id: "1330000000000000000",
    type: 1,
    token: "aW50ZXJhY3Rpb246cGluZw",
    version: 1,
    user: { id: "53908232506183680", username: "mason" },
  });
  const event = JSON.stringify({
    version: 1,
    application_id: "1330000000000000000",
    type: 1,
    event: {
      type: "APPLICATION_AUTHORIZED",
      timestamp: "2025-12-31T23:59:58.000000+00:00",
      data: { integration_type: 1, scopes: ["applications.commands"], user: { id: "53908232506183680" } },
    },
  });
  const eventPing = JSON.stringify({ version: 1, application_id: "1330000000000000000", type: 0 });
  await add("valid_interaction", ts, command, sign(app, ts, command), accepted("1331111111111111111", "APPLICATION_COMMAND"));
  await add("interaction_ping", ts, ping, sign(app, ts, ping), { status: 200, body_json: { type: 1 }, stored: false });
  await add("valid_webhook_event", ts, event, sign(app, ts, event), accepted(bodySha(event), "APPLICATION_AUTHORIZED"));
  await add("webhook_event_ping", ts, eventPing, sign(app, ts, eventPing), { status: 204, stored: false });
  await add("ping_signed_by_another_key", ts, ping, sign(stranger, ts, ping), refused("invalid_signature"));
  const second = command.replace("1331111111111111111", "1331111111111111113");
  await add("valid_second_key_rotation", ts, second, sign(rotated, ts, second), accepted("1331111111111111113", "APPLICATION_COMMAND"));
  await add("tampered_body", ts, command.replace('"ping"', '"pong"'), sign(app, ts, command), refused("invalid_signature"));
  await add("wrong_key", ts, command, sign(stranger, ts, command), refused("invalid_signature"));
  await add("timestamp_changed", String(NOW - 1), command, sign(app, ts, command), refused("invalid_signature"));
  const oldTs = String(NOW - 301);
  await add("expired_301s", oldTs, command, sign(app, oldTs, command), refused("timestamp_out_of_tolerance"),
    "discord-interactions checks no freshness; hookbox refuses a signed timestamp outside the source's tolerance (300 s)");
  const futureTs = String(NOW + 301);
  await add("future_301s", futureTs, command, sign(app, futureTs, command), refused("timestamp_out_of_tolerance"),
    "discord-interactions checks no freshness; hookbox refuses a signed timestamp outside the source's tolerance (300 s)");
  await add("malformed_signature_not_hex", ts, command, "zz" + sign(app, ts, command).slice(2), refused("malformed_signature"));
  await add("truncated_signature", ts, command, sign(app, ts, command).slice(0, 126), refused("malformed_signature"));
  await add("missing_signature", ts, command, undefined, refused("missing_signature"));
  await add("missing_timestamp", undefined, command, sign(app, ts, command), refused("missing_timestamp"));
  write(
    "discord",
    { "discord-interactions": pkg("discord-interactions") },
    { secrets: [app.publicHex, rotated.publicHex], tolerance: "5m" },
    cases,
  );
}

// ----------------------------------------------------------- sendgrid ---

function p256(label) {
  const ecdh = crypto.createECDH("prime256v1");
  ecdh.setPrivateKey(seed(label));
  const point = ecdh.getPublicKey();
  const b64u = (b) => b.toString("base64url");
  const jwk = { kty: "EC", crv: "P-256", d: b64u(seed(label)), x: b64u(point.subarray(1, 33)), y: b64u(point.subarray(33)) };
  const privateKey = crypto.createPrivateKey({ key: jwk, format: "jwk" });
  const spki = crypto.createPublicKey(privateKey).export({ type: "spki", format: "der" }).toString("base64");
  return { privateKey, spki };
}

async function sendgrid() {
  const key = p256("sendgrid-account");
  const rotated = p256("sendgrid-account-second");
  const stranger = p256("sendgrid-stranger");
  const sign = (k, ts, body) => crypto.sign("sha256", Buffer.from(ts + body), k.privateKey).toString("base64");
  const ew = new EventWebhook();
  const pem = (spki) => `-----BEGIN PUBLIC KEY-----\n${spki}\n-----END PUBLIC KEY-----`;
  const cases = [];
  const add = (name, ts, body, sig, expect, note) => {
    const headers = { "Content-Type": "application/json" };
    if (ts !== undefined) headers["X-Twilio-Email-Event-Webhook-Timestamp"] = ts;
    if (sig !== undefined) headers["X-Twilio-Email-Event-Webhook-Signature"] = sig;
    let sdk = "reject";
    for (const k of [key, rotated]) {
      try {
        if (ew.verifySignature(ew.convertPublicKeyToECDSA(pem(k.spki)), body, sig ?? "", ts)) sdk = "accept";
      } catch (_) {}
    }
    cases.push({ name, headers, body, sdk, expect, ...(note ? { sdk_differs: note } : {}) });
  };
  const ts = String(NOW - 1);
  const one = JSON.stringify([
    { email: "ann@example.com", timestamp: NOW - 30, event: "delivered", "smtp-id": "<14c5d75ce93.dfd.64b469@ismtpd-555>", sg_event_id: "sg_ev_delivered_1", sg_message_id: "14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.0" },
  ]);
  const batch = JSON.stringify([
    { email: "ann@example.com", timestamp: NOW - 20, event: "open", sg_event_id: "sg_ev_open_1", useragent: "Mozilla/5.0" },
    { email: "bob@example.com", timestamp: NOW - 10, event: "click", sg_event_id: "sg_ev_click_1", url: "https://example.com" },
  ]);
  add("valid_single_event", ts, one, sign(key, ts, one), accepted("sg_ev_delivered_1", "delivered"));
  add("valid_batch", ts, batch, sign(key, ts, batch), accepted(bodySha(batch), "open"));
  const second = one.replace("sg_ev_delivered_1", "sg_ev_delivered_2");
  add("valid_second_key_rotation", ts, second, sign(rotated, ts, second), accepted("sg_ev_delivered_2", "delivered"));
  const dayOld = String(NOW - 86400);
  const late = one.replace("sg_ev_delivered_1", "sg_ev_delivered_late");
  add("valid_day_old_timestamp", dayOld, late, sign(key, dayOld, late), accepted("sg_ev_delivered_late", "delivered"));
  add("tampered_body", ts, one.replace("ann@", "eve@"), sign(key, ts, one), refused("invalid_signature"));
  add("wrong_key", ts, one, sign(stranger, ts, one), refused("invalid_signature"));
  add("timestamp_changed", String(NOW - 2), one, sign(key, ts, one), refused("invalid_signature"));
  add("malformed_signature_not_base64", ts, one, "!" + sign(key, ts, one).slice(1), refused("malformed_signature"));
  add("missing_signature", ts, one, undefined, refused("missing_signature"));
  add("missing_timestamp", undefined, one, sign(key, ts, one), refused("missing_timestamp"));
  write(
    "sendgrid",
    { "@sendgrid/eventwebhook": pkg("@sendgrid/eventwebhook"), "starkbank-ecdsa": pkg("starkbank-ecdsa") },
    { secrets: [key.spki, rotated.spki] },
    cases,
  );
}

// ------------------------------------------------------------ mailgun ---

// Mailgun's documented check, as on
// documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks
// (mailgun.js has no verification helper).
const mailgunVerify = ({ signingKey, timestamp, token, signature }) =>
  crypto.createHmac("sha256", signingKey).update(timestamp.concat(token)).digest("hex") === signature;

async function mailgun() {
  const key = "key-" + seed("mailgun-signing").toString("hex").slice(0, 32);
  const parent = "key-" + seed("mailgun-parent").toString("hex").slice(0, 32);
  const token = (n) => seed("mailgun-token-" + n).toString("hex").slice(0, 50);
  const cases = [];
  const add = (name, body, contentType, fields, expect, note) => {
    let sdk = "reject";
    for (const signingKey of [key, parent]) {
      for (const signature of [fields.signature, fields["parent-signature"]]) {
        if (
          typeof signature === "string" && typeof fields.timestamp === "string" && typeof fields.token === "string" &&
          mailgunVerify({ signingKey, timestamp: fields.timestamp, token: fields.token, signature })
        )
          sdk = "accept";
      }
    }
    cases.push({ name, headers: { "Content-Type": contentType }, body, sdk, expect, ...(note ? { sdk_differs: note } : {}) });
  };
  const json = (sig, eventData) => JSON.stringify({ signature: sig, "event-data": eventData });
  const eventData = (id) => ({ event: "delivered", id, timestamp: NOW - 3, recipient: "ann@example.com", message: { headers: { "message-id": `${id}@example.com` } } });
  const signed = (k, n, ts = String(NOW - 3)) => ({ timestamp: ts, token: token(n), signature: hmacHex(k, ts, token(n)) });
  const j = "application/json";
  let f = signed(key, 1);
  add("valid_json", json(f, eventData("ev1")), j, f, accepted(token(1), "delivered"));
  f = signed(key, 2);
  const form = new URLSearchParams({ ...f, event: "delivered", recipient: "ann@example.com" }).toString();
  add("valid_form", form, "application/x-www-form-urlencoded", f, accepted(token(2), "delivered"));
  f = { ...signed("key-subaccount-not-configured", 3), "parent-signature": signed(parent, 3).signature };
  add("valid_parent_signature", json(f, eventData("ev3")), j, f, accepted(token(3), "delivered"));
  f = signed(key, 4, String(NOW - 7200));
  add("valid_two_hours_old", json(f, eventData("ev4")), j, f, accepted(token(4), "delivered"));
  f = signed(key, 5);
  add("event_data_is_not_signed", json(f, { ...eventData("ev5"), event: "failed" }), j, f, accepted(token(5), "failed"));
  f = { ...signed(key, 6), token: token(60) };
  add("tampered_token", json(f, eventData("ev6")), j, f, refused("invalid_signature"));
  f = signed("key-wrong", 7);
  add("wrong_key", json(f, eventData("ev7")), j, f, refused("invalid_signature"));
  f = signed(key, 8);
  f = { ...f, signature: f.signature.toUpperCase() };
  add("uppercase_hex", json(f, eventData("ev8")), j, f, refused("invalid_signature"));
  f = signed(key, 9);
  f = { ...f, signature: f.signature.slice(0, 62) };
  add("truncated", json(f, eventData("ev9")), j, f, refused("malformed_signature"));
  add("missing_signature", JSON.stringify({ "event-data": eventData("ev10") }), j, {}, refused("missing_signature"));
  f = signed(key, 11, "1767225597.5");
  add("malformed_timestamp", json(f, eventData("ev11")), j, f, refused("malformed_timestamp"),
    "the documented check signs any text; hookbox takes whole unix seconds only");
  write("mailgun", { "documented algorithm": "documentation.mailgun.com securing-webhooks (mailgun.js has no verifier)" }, { secrets: [key, parent] }, cases);
}

// --------------------------------------------------------------- meta ---

async function meta() {
  const secret = seed("meta-app-secret").toString("hex").slice(0, 32);
  const verifyToken = "hookbox-meta-" + seed("meta-verify").toString("hex").slice(0, 16);
  // Meta's documented check: sha256= + hex HMAC of the raw body with the app secret.
  const sig = (k, body) => "sha256=" + hmacHex(k, body);
  const documented = (header, body) => header === sig(secret, body);
  const cases = [];
  const add = (name, body, header, expect, extra = {}) => {
    const headers = { "Content-Type": "application/json", ...extra };
    if (header !== undefined) headers["X-Hub-Signature-256"] = header;
    cases.push({ name, headers, body, sdk: documented(header, body) ? "accept" : "reject", expect });
  };
  const page = JSON.stringify({
    object: "page",
    entry: [
      { id: "102123456789", time: NOW_MS - 900, messaging: [{ sender: { id: "1" }, recipient: { id: "102123456789" }, timestamp: NOW_MS - 950, message: { mid: "m_1", text: "hi" } }] },
      { id: "102123456789", time: NOW_MS - 800, messaging: [{ sender: { id: "2" }, recipient: { id: "102123456789" }, timestamp: NOW_MS - 850, message: { mid: "m_2", text: "yo" } }] },
    ],
  });
  const whatsapp = JSON.stringify({
    object: "whatsapp_business_account",
    entry: [{ id: "WHATSAPP_BUSINESS_ACCOUNT_ID", changes: [{ field: "messages", value: { messaging_product: "whatsapp", statuses: [{ id: "wamid.X", status: "delivered", timestamp: String(NOW - 1) }] } }] }],
  });
  add("valid_page_batch", page, sig(secret, page), accepted(`meta:102123456789@${NOW_MS - 900},102123456789@${NOW_MS - 800}`, "page"));
  add("valid_whatsapp", whatsapp, sig(secret, whatsapp), accepted(bodySha(whatsapp), "whatsapp_business_account"));
  add("tampered_body", page.replace('"hi"', '"ho"'), sig(secret, page), refused("invalid_signature"));
  add("wrong_secret", page, sig("not-the-app-secret", page), refused("invalid_signature"));
  add("sha1_only", page, undefined, refused("missing_signature"), {
    "X-Hub-Signature": "sha1=" + crypto.createHmac("sha1", secret).update(page).digest("hex"),
  });
  add("bare_hex_without_prefix", page, hmacHex(secret, page), refused("malformed_signature"));
  add("truncated", page, sig(secret, page).slice(0, -2), refused("invalid_signature"));
  const q = (mode, challenge, token) => new URLSearchParams({ "hub.mode": mode, "hub.challenge": challenge, "hub.verify_token": token }).toString();
  const handshake = (name, query, expect) => cases.push({ name, method: "GET", query, sdk: "documented", expect });
  handshake("handshake", q("subscribe", "1158201444", verifyToken), { status: 200, body_text: "1158201444", stored: false });
  handshake("handshake_wrong_token", q("subscribe", "1158201444", verifyToken + "x"), { status: 403, error: "invalid_verify_token" });
  handshake("handshake_not_subscribe", q("unsubscribe", "1158201444", verifyToken), { status: 404, error: "not_a_handshake" });
  handshake("handshake_no_challenge", `hub.mode=subscribe&hub.verify_token=${verifyToken}`, { status: 404, error: "not_a_handshake" });
  write("meta", { "documented algorithm": "developers.facebook.com/docs/graph-api/webhooks/getting-started" }, { secrets: [secret], verify_token: verifyToken }, cases);
}

await linear();
await discord();
await sendgrid();
await mailgun();
await meta();
