// Retry timing (pure logic): exponential backoff with jitter within its bounds,
// Retry-After honoured, a long one not waited for. Retries themselves are tested
// against a real gateway in gateway.test.js.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Sluice } from "../src/index.js";

test("backoff doubles with jitter up to the ceiling", () => {
  const client = new Sluice({ baseURL: "http://127.0.0.1:1", apiKey: "k", backoff: 500,
    maxBackoff: 4000 });
  [500, 1000, 2000, 4000, 4000].forEach((ceiling, attempt) => {
    const delays = new Set(Array.from({ length: 50 }, () => client._delay(attempt, null)));
    for (const d of delays) assert.ok(d >= ceiling / 2 && d <= ceiling, `${attempt}: ${d}`);
    assert.ok(delays.size > 1, "jittered");
  });
});

test("Retry-After is honoured; a longer one than maxRetryWait is not waited for", () => {
  const client = new Sluice({ baseURL: "http://127.0.0.1:1", apiKey: "k", backoff: 500,
    maxRetryWait: 30_000 });
  for (let i = 0; i < 50; i++) {
    const d = client._delay(0, 2);
    assert.ok(d >= 2000 && d <= 2500, String(d));
  }
  assert.equal(client._delay(3, 31), null);
});
