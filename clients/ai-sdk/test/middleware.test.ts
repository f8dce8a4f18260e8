// omMemory() with the AI SDK's own mock model (`ai/test`) and its real generateText / streamText, against a
// real `om serve` (OM_TS_BASE_URL, OM_TS_API_KEY: tests/client_ts/test_ai_sdk.py starts one).
//
//   OM_TS_BASE_URL=http://127.0.0.1:8088 OM_TS_API_KEY=omk_... npm test
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test } from "node:test";

import type { LanguageModelV3CallOptions, LanguageModelV3StreamPart } from "@ai-sdk/provider";
import { OMClient } from "@om/client";
import { generateText, jsonSchema, simulateReadableStream, stepCountIs, streamText, tool, wrapLanguageModel } from "ai";
import { MockLanguageModelV3 } from "ai/test";

import { newMessages, omMemory } from "../dist/index.js";

const BASE_URL = process.env.OM_TS_BASE_URL ?? "";
const API_KEY = process.env.OM_TS_API_KEY ?? "";
const live = { skip: BASE_URL === "" ? "OM_TS_BASE_URL is not set (no om server to test against)" : false };

const newId = (prefix: string) => `${prefix}-${randomUUID().slice(0, 12)}`;
const client = () => new OMClient(BASE_URL, { apiKey: API_KEY, timeoutMs: 60_000 });

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 5, text: 5, reasoning: 0 },
};
const stop = { unified: "stop", raw: "stop" } as const;

/** A mock model answering each call with the next of `replies`. */
function replying(...replies: string[]): MockLanguageModelV3 {
  let call = 0;
  return new MockLanguageModelV3({
    doGenerate: async () => ({
      content: [{ type: "text", text: replies[call++] ?? "(no reply left)" }],
      finishReason: stop,
      usage,
      warnings: [],
    }),
  });
}

/** Everything the model was sent, as one string (to look for what om put in its context). */
const sent = (call: LanguageModelV3CallOptions | undefined) => JSON.stringify(call?.prompt ?? []);

type Part = { type?: string; text?: string; state?: string };
const partsOf = (m: { parts?: unknown[] }) => (m.parts ?? []) as Part[];

async function stored(om: OMClient, threadId: string): Promise<Array<[string, string]>> {
  const page = await om.messages(threadId, { limit: 100 });
  return page.messages
    .map((m) => [m.role, partsOf(m).map((p) => p.text ?? "").join("")] as [string, string]);
}

describe("the prompt's new messages", () => {
  test("are its trailing user and tool messages; earlier ones are om's to keep", () => {
    const fresh = newMessages([
      { role: "system", content: "be brief" },
      { role: "user", content: [{ type: "text", text: "old question" }] },
      { role: "assistant", content: [{ type: "text", text: "old answer" }] },
      { role: "user", content: [{ type: "text", text: "new question" }] },
    ]);
    assert.deepEqual(fresh, [{ role: "user", text: "new question" }]);
  });
});

describe("omMemory against om serve", live, () => {
  test("generateText: the turn is posted, the model gets om's history, the reply is stored", async () => {
    const om = client();
    const threadId = newId("ai-gen");
    const resourceId = newId("ai-user");
    const model = replying("Welcome, Dana!", "You live in Porto.");
    const wrapped = wrapLanguageModel({ model, middleware: omMemory({ client: om, threadId, resourceId }) });

    const first = await generateText({ model: wrapped, system: "Answer briefly.", prompt: "Hi, I'm Dana and I live in Porto" });
    assert.equal(first.text, "Welcome, Dana!");
    // The app sends only the new message; the second call's prompt still holds the first exchange: om's.
    const second = await generateText({ model: wrapped, system: "Answer briefly.", prompt: "Where do I live?" });
    assert.equal(second.text, "You live in Porto.");
    const prompt = model.doGenerateCalls[1]?.prompt ?? [];
    assert.deepEqual(prompt[0], { role: "system", content: "Answer briefly." }, "the app's system message first");
    const roles = prompt.filter((m) => m.role !== "system").map((m) => m.role);
    assert.deepEqual(roles, ["user", "assistant", "user"], sent(model.doGenerateCalls[1]));
    assert.ok(sent(model.doGenerateCalls[1]).includes("I live in Porto"));
    assert.ok(sent(model.doGenerateCalls[1]).includes("Welcome, Dana!"));

    assert.deepEqual(await stored(om, threadId), [
      ["user", "Hi, I'm Dana and I live in Porto"],
      ["assistant", "Welcome, Dana!"],
      ["user", "Where do I live?"],
      ["assistant", "You live in Porto."],
    ]);
    assert.equal((await om.thread(threadId)).resource_id, resourceId);
  });

  test("streamText: the model streams through, the whole reply is stored once the stream ends", async () => {
    const om = client();
    const threadId = newId("ai-stream");
    const chunks: LanguageModelV3StreamPart[] = [
      { type: "stream-start", warnings: [] },
      { type: "text-start", id: "t1" },
      { type: "text-delta", id: "t1", delta: "The ferry " },
      { type: "text-delta", id: "t1", delta: "leaves at " },
      { type: "text-delta", id: "t1", delta: "nine." },
      { type: "text-end", id: "t1" },
      { type: "finish", finishReason: stop, usage },
    ];
    const model = new MockLanguageModelV3({ doStream: async () => ({ stream: simulateReadableStream({ chunks }) }) });
    const wrapped = wrapLanguageModel({ model, middleware: omMemory({ client: om, threadId }) });
    const result = streamText({ model: wrapped, prompt: "When does the ferry leave?" });
    const deltas: string[] = [];
    for await (const delta of result.textStream) deltas.push(delta);
    assert.deepEqual(deltas, ["The ferry ", "leaves at ", "nine."]);
    assert.ok(sent(model.doStreamCalls[0]).includes("When does the ferry leave?"));
    assert.deepEqual(await stored(om, threadId), [
      ["user", "When does the ferry leave?"],
      ["assistant", "The ferry leaves at nine."],
    ]);
  });

  test("streamText: a reply om could not store is an error of the stream, not a silent loss", async () => {
    const threadId = newId("ai-stream-fail");
    let calls = 0;
    const failingSecond: typeof fetch = (input, init) =>
      ++calls === 1 ? fetch(input, init) : Promise.reject(new TypeError("fetch failed"));
    const om = new OMClient(BASE_URL, { apiKey: API_KEY, fetch: failingSecond, retry: { maxAttempts: 1 } });
    const chunks: LanguageModelV3StreamPart[] = [
      { type: "text-start", id: "t1" },
      { type: "text-delta", id: "t1", delta: "lost?" },
      { type: "text-end", id: "t1" },
      { type: "finish", finishReason: stop, usage },
    ];
    const model = new MockLanguageModelV3({ doStream: async () => ({ stream: simulateReadableStream({ chunks }) }) });
    const wrapped = wrapLanguageModel({ model, middleware: omMemory({ client: om, threadId }) });
    const result = streamText({ model: wrapped, prompt: "hello", onError: () => {} });
    const deltas: string[] = [];
    await assert.rejects(async () => {
      for await (const delta of result.textStream) deltas.push(delta);
    }, /gave up after 1 attempts: fetch failed/);
    assert.deepEqual(deltas, ["lost?"], "the reply streamed through before the error");
    assert.equal(calls, 2, "the user message was posted, then the reply was tried");
    assert.deepEqual(await stored(client(), threadId), [["user", "hello"]]);
  });

  test("om's observations of the thread are in the model's prompt", async () => {
    const om = client();
    const threadId = newId("ai-memory");
    await om.setConfig(threadId, { observation: { messageTokens: 1000, bufferTokens: false } }, { resourceId: threadId });
    for (let i = 0; i < 10; i++) {
      const fact = `Fact ${i}: my locker code is ${7000 + i}. `;
      await om.postTurn(threadId, [{ role: "user", text: fact.repeat(8) }], { context: "none" });
    }
    await om.observe(threadId);
    const observed = (await om.observations(threadId)).active?.observations ?? "";
    assert.ok(observed.includes("7003"), `the offline observer wrote the facts: ${observed}`);

    const model = replying("Noted.");
    const wrapped = wrapLanguageModel({ model, middleware: omMemory({ client: om, threadId }) });
    await generateText({ model: wrapped, prompt: "What is my locker code for fact 3?" });
    const systems = (model.doGenerateCalls[0]?.prompt ?? []).filter((m) => m.role === "system");
    assert.ok(systems.some((m) => m.content === "<observations>"), JSON.stringify(systems));
    assert.ok(systems.some((m) => m.content.includes("locker code is 7003")), JSON.stringify(systems));
  });

  test("a tool loop: the call and its result are posted as they happen, then the final answer", async () => {
    const om = client();
    const threadId = newId("ai-tools");
    let call = 0;
    const model = new MockLanguageModelV3({
      doGenerate: async () =>
        call++ === 0
          ? {
              content: [{ type: "tool-call", toolCallId: "call-1", toolName: "weather", input: '{"city":"Porto"}' }],
              finishReason: { unified: "tool-calls", raw: "tool_calls" },
              usage,
              warnings: [],
            }
          : { content: [{ type: "text", text: "Sunny in Porto." }], finishReason: stop, usage, warnings: [] },
    });
    const wrapped = wrapLanguageModel({ model, middleware: omMemory({ client: om, threadId }) });
    const weather = tool({
      description: "The weather in a city",
      inputSchema: jsonSchema<{ city: string }>({ type: "object", properties: { city: { type: "string" } } }),
      execute: async ({ city }) => `sunny in ${city}`,
    });
    const result = await generateText({
      model: wrapped,
      prompt: "Weather in Porto?",
      tools: { weather },
      stopWhen: stepCountIs(3),
    });
    assert.equal(result.text, "Sunny in Porto.");
    // The second step's prompt is om's context: it holds the tool call and its result.
    const second = sent(model.doGenerateCalls[1]);
    assert.ok(second.includes("call-1") && second.includes("sunny in Porto"), second);
    const page = await om.messages(threadId, { limit: 100 });
    const parts = page.messages.flatMap((m) => partsOf(m).map((p) => `${m.role}:${p.type}:${p.state ?? ""}`));
    assert.ok(parts.some((p) => p.startsWith("assistant:tool-invocation")), parts.join());
    const texts = (await stored(om, threadId)).map(([role, text]) => `${role}:${text}`);
    assert.equal(texts[0], "user:Weather in Porto?");
    assert.equal(texts.at(-1), "assistant:Sunny in Porto.");
  });

  test("the thread can be named per call; without any thread the call fails saying how to name one", async () => {
    const om = client();
    const threadId = newId("ai-per-call");
    const model = replying("Hello!");
    const wrapped = wrapLanguageModel({ model, middleware: omMemory({ client: om }) });
    await generateText({ model: wrapped, prompt: "hello", providerOptions: { om: { threadId } } });
    assert.deepEqual(await stored(om, threadId), [
      ["user", "hello"],
      ["assistant", "Hello!"],
    ]);
    await assert.rejects(generateText({ model: wrapped, prompt: "hello", maxRetries: 0 }), /omMemory needs a thread/);
    assert.equal(model.doGenerateCalls.length, 1, "the model is not called without memory");
  });

  test("OM_BASE_URL and OM_API_KEY configure the middleware's own client", async () => {
    const saved = [process.env.OM_BASE_URL, process.env.OM_API_KEY];
    process.env.OM_BASE_URL = BASE_URL;
    process.env.OM_API_KEY = API_KEY;
    try {
      const threadId = newId("ai-env");
      const wrapped = wrapLanguageModel({ model: replying("Hi."), middleware: omMemory({ threadId }) });
      await generateText({ model: wrapped, prompt: "hi" });
      assert.equal((await client().messages(threadId)).messages.length, 2);
    } finally {
      for (const [name, value] of [["OM_BASE_URL", saved[0]], ["OM_API_KEY", saved[1]]] as const) {
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
      }
    }
  });
});
