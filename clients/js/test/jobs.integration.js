// submit / wait / cancel and verifySignature against a real gateway with the jobs
// service, a worker and a webhook receiver. Run by tests/integration/test_jobs_js.py,
// which sets SLUICE_BASE_URL, SLUICE_API_KEY, SLUICE_TEST_CALLBACK_URL and
// SLUICE_TEST_WEBHOOK_SECRET, then checks the receiver got the signed job.
import assert from "node:assert/strict";
import { test } from "node:test";

import { APIStatusError, NotFoundError, Sluice } from "../src/index.js";

const env = process.env;
const sluice = new Sluice({ baseURL: env.SLUICE_BASE_URL, apiKey: env.SLUICE_API_KEY });

test("submit, then wait for the answer; a callback is sent", async () => {
  const job = await sluice.submit("chat-demo", [{ role: "user", content: "from js" }],
    { callbackUrl: env.SLUICE_TEST_CALLBACK_URL });
  assert.equal(job.status, "queued");
  const done = await sluice.wait(job, { timeout: 30_000 });
  assert.equal(done.status, "succeeded");
  assert.equal(done.result.status_code, 200);
  assert.ok(done.result.body.choices[0].message.content);
  await assert.rejects(sluice.job("job_0000"), NotFoundError);
  await assert.rejects(sluice.cancel(done.id), (e) => e instanceof APIStatusError && e.code === 409);
});
