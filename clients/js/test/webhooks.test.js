// verifySignature against signatures made the way the gateway's workers make them
// (HMAC-SHA256 of "<t>.<body>", hex). Pure: runs without a gateway.
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { test } from "node:test";

import { verifySignature } from "../src/index.js";

const SECRET = "whsec_test-secret";
const BODY = '{"id":"job_1","status":"succeeded"}';
const sign = (body, t = Math.floor(Date.now() / 1000), secret = SECRET) =>
  `t=${t},v1=${createHmac("sha256", secret).update(`${t}.${body}`).digest("hex")}`;

test("a fresh signature verifies, as a string or as bytes", async () => {
  assert.equal(await verifySignature(SECRET, sign(BODY), BODY), true);
  assert.equal(await verifySignature(SECRET, sign(BODY), new TextEncoder().encode(BODY)), true);
});

test("a changed body, another secret or an old signature fails", async () => {
  assert.equal(await verifySignature(SECRET, sign(BODY), BODY + " "), false);
  assert.equal(await verifySignature("whsec_other", sign(BODY), BODY), false);
  const old = sign(BODY, Math.floor(Date.now() / 1000) - 301);
  assert.equal(await verifySignature(SECRET, old, BODY), false);
  assert.equal(await verifySignature(SECRET, old, BODY, 600), true);
});

test("malformed headers are false, not errors", async () => {
  for (const header of [null, "", "garbage", "t=abc,v1=00", "v1=00", "t=1", "t=1,v1"]) {
    assert.equal(await verifySignature(SECRET, header, BODY), false);
  }
});
