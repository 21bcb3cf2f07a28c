// Checking the signature of a Sluice webhook (a finished async job POSTed to your URL).

const hex = (buf) => Array.from(new Uint8Array(buf), (b) => b.toString(16).padStart(2, "0")).join("");

function sameText(a, b) {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

// Check a Sluice webhook's X-Sluice-Signature ("t=<unix>,v1=<hex HMAC-SHA256 of
// "<t>.<body>">") against the raw body (a string or bytes) with the consumer's webhook
// secret; a time further than `tolerance` seconds from now is refused (replays).
// Resolves to true or false, never throws on a malformed header. WebCrypto: Node 18+,
// browsers, Deno, Bun. A delivery may come twice: deduplicate by the job's id.
export async function verifySignature(secret, header, body, tolerance = 300, now = undefined) {
  if (!secret || !header) return false;
  let t = null;
  const sigs = [];
  for (const part of String(header).split(",")) {
    const i = part.indexOf("=");
    if (i < 0) return false;
    const key = part.slice(0, i).trim();
    const value = part.slice(i + 1).trim();
    if (key === "t") {
      if (!/^[0-9]+$/.test(value)) return false;
      t = Number(value);
    } else if (key === "v1") {
      sigs.push(value);
    }
  }
  if (t === null || !sigs.length) return false;
  const current = now ?? Date.now() / 1000;
  if (Math.abs(current - t) > tolerance) return false;
  const enc = new TextEncoder();
  const bytes = typeof body === "string" ? enc.encode(body) : new Uint8Array(body);
  const prefix = enc.encode(`${t}.`);
  const message = new Uint8Array(prefix.length + bytes.length);
  message.set(prefix);
  message.set(bytes, prefix.length);
  const key = await globalThis.crypto.subtle.importKey(
    "raw", enc.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const expected = hex(await globalThis.crypto.subtle.sign("HMAC", key, message));
  return sigs.some((sig) => sameText(expected, sig));
}

