// stubvisor's OpenAI API driven by OpenAI's official Node client. The Go
// test TestOpenAINodeClient starts the server (tiny_lm, tiny_embed) and
// runs this file with OPENAI_BASE_URL set; it then checks the server log
// for the cancellation the last test causes.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: "unused", maxRetries: 0, timeout: 30000 });
const prompt = "The keeper ";

test("models", async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.ok(ids.includes("tiny_lm") && ids.includes("tiny_embed"), ids.join(","));
  const m = await client.models.retrieve("tiny_lm");
  assert.equal(m.id, "tiny_lm");
  await assert.rejects(client.models.retrieve("no_such_model"), (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
});

test("completion with usage and stop", async () => {
  const c = await client.completions.create({ model: "tiny_lm", prompt, max_tokens: 20, temperature: 0 });
  const text = c.choices[0].text;
  assert.equal([...text].length, 20);
  assert.equal(c.choices[0].finish_reason, "length");
  assert.deepEqual(c.usage, { prompt_tokens: prompt.length, completion_tokens: 20, total_tokens: prompt.length + 20 });
  const stop = text.slice(4, 6);
  const s = await client.completions.create({ model: "tiny_lm", prompt, max_tokens: 20, temperature: 0, stop: [stop] });
  assert.equal(s.choices[0].text, text.slice(0, text.indexOf(stop)));
  assert.equal(s.choices[0].finish_reason, "stop");
});

test("n > 1", async () => {
  const c = await client.completions.create({ model: "tiny_lm", prompt, max_tokens: 16, n: 3, seed: 11, temperature: 1.2 });
  assert.equal(c.choices.length, 3);
  assert.deepEqual(c.choices.map((ch) => ch.index), [0, 1, 2]);
  assert.equal(c.usage.completion_tokens, 48);
  const chat = await client.chat.completions.create({ model: "tiny_lm", messages: [{ role: "user", content: "Ships" }], max_tokens: 8, n: 2 });
  assert.equal(chat.choices.length, 2);
});

test("chat, streaming and not", async () => {
  const req = { model: "tiny_lm", messages: [{ role: "user", content: "What do you see?" }], max_completion_tokens: 12, temperature: 0 };
  const whole = await client.chat.completions.create(req);
  assert.equal(whole.choices[0].message.role, "assistant");
  assert.equal(whole.usage.completion_tokens, 12);
  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = "";
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      text += ch.delta.content ?? "";
      finish = ch.finish_reason ?? finish;
    }
  }
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, "length");
  assert.deepEqual(usage, whole.usage);
});

test("error mid-stream", async () => {
  const stream = await client.chat.completions.create({ model: "tiny_lm", messages: [{ role: "user", content: "#fail" }], max_tokens: 20, stream: true });
  let chunks = 0;
  await assert.rejects(
    (async () => {
      for await (const _ of stream) chunks++;
    })(),
    (e) => e instanceof OpenAI.APIError && /failed after 3 tokens/.test(e.message),
  );
  assert.ok(chunks >= 3, `${chunks} chunks before the error`);
});

test("unknown model and bad parameters", async () => {
  await assert.rejects(client.chat.completions.create({ model: "nope", messages: [{ role: "user", content: "x" }] }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === "model_not_found");
  await assert.rejects(client.completions.create({ model: "tiny_lm", prompt, temperature: 5 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "temperature");
});

test("embeddings", async () => {
  // The client asks for base64 and decodes it.
  const e = await client.embeddings.create({ model: "tiny_embed", input: ["the lighthouse", "the lighthouses", "zebra"] });
  assert.equal(e.data.length, 3);
  assert.equal(e.data[0].embedding.length, 64);
  const dot = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0);
  assert.ok(dot(e.data[0].embedding, e.data[1].embedding) > dot(e.data[0].embedding, e.data[2].embedding));
  assert.equal(e.usage.prompt_tokens, "the lighthouse".length + "the lighthouses".length + "zebra".length);
  const f = await client.embeddings.create({ model: "tiny_embed", input: "x", dimensions: 8, encoding_format: "float" });
  assert.equal(f.data[0].embedding.length, 8);
});

test("a client that disconnects cancels the request", async () => {
  const stream = await client.completions.create({ model: "tiny_lm", prompt: "#slow", max_tokens: 2000, stream: true });
  let got = 0;
  for await (const chunk of stream) {
    got += chunk.choices.length;
    if (got >= 2) {
      stream.controller.abort();
      break;
    }
  }
  assert.ok(got >= 2);
  console.log("node client: disconnected mid-stream");
});
