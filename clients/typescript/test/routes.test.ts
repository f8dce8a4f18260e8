// Every route of the API through the client, against a real `om serve` (OM_TS_BASE_URL, OM_TS_API_KEY:
// tests/client_ts starts one): memory, config, resources, webhooks, the key's own views, the raw
// response of a call, and the OM_BASE_URL / OM_API_KEY defaults.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test } from "node:test";

import { APIPromise, OMBadRequest, OMClient, OMConflict, OMNotFound, OMUnauthorized, lineSha256 } from "../dist/index.js";

const BASE_URL = process.env.OM_TS_BASE_URL ?? "";
const API_KEY = process.env.OM_TS_API_KEY ?? "";
const live = { skip: BASE_URL === "" ? "OM_TS_BASE_URL is not set (no om server to test against)" : false };

const newId = (prefix: string) => `${prefix}-${randomUUID().slice(0, 12)}`;
const client = () => new OMClient(BASE_URL, { apiKey: API_KEY, timeoutMs: 60_000 });

/** Runs `body` with the environment variables set (undefined: removed), then puts them back. */
async function withEnv(vars: Record<string, string | undefined>, body: () => Promise<void>): Promise<void> {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  const put = (values: Record<string, string | undefined>) => {
    for (const [k, v] of Object.entries(values)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  };
  put(vars);
  try {
    await body();
  } finally {
    put(saved);
  }
}

async function collect<T>(lines: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const line of lines) out.push(line);
  return out;
}

/** A thread of `resourceId` with a few exchanges stored. */
async function conversation(om: OMClient, threadId: string, resourceId: string, turns = 3): Promise<void> {
  for (let i = 0; i < turns; i++) {
    await om.postTurn(threadId, [{ role: "user", text: `I keep ${i + 2} bicycles in the shed at Alfama` }], {
      resourceId,
      context: "none",
    });
    await om.postTurn(threadId, [{ role: "assistant", text: `Noted: ${i + 2} bicycles at Alfama.` }], {
      resourceId,
      context: "none",
    });
  }
}

describe("client setup", () => {
  test("OM_BASE_URL and OM_API_KEY are the defaults; an argument wins; no URL at all is an error", async () => {
    await withEnv({ OM_BASE_URL: "http://om.example:8088/", OM_API_KEY: undefined }, async () => {
      assert.equal(new OMClient().baseUrl, "http://om.example:8088");
      assert.equal(new OMClient("http://other:1").baseUrl, "http://other:1");
      assert.equal(new OMClient({ baseUrl: "http://third:2" }).baseUrl, "http://third:2");
    });
    await withEnv({ OM_BASE_URL: undefined }, async () => {
      assert.throws(() => new OMClient(), /OM_BASE_URL/);
    });
  });

  test("lineSha256 is the hex SHA-256 of the line's UTF-8 text", async () => {
    assert.equal(await lineSha256("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  });
});

describe("every route against om serve", live, () => {
  test("the environment's key is used, and a wrong one is refused", async () => {
    await withEnv({ OM_BASE_URL: BASE_URL, OM_API_KEY: API_KEY }, async () => {
      const me = await new OMClient().whoami();
      assert.equal(me.auth, "key");
      assert.match(me.tenant_id ?? "", /^tenant-/);
    });
    await withEnv({ OM_BASE_URL: BASE_URL, OM_API_KEY: "omk_not_a_key" }, async () => {
      await assert.rejects(new OMClient({ retry: { maxAttempts: 1 } }).whoami(), OMUnauthorized);
    });
  });

  test("withResponse gives the HTTP response with the parsed answer, from one request", async () => {
    let requests = 0;
    const counting: typeof fetch = (input, init) => {
      requests += 1;
      return fetch(input, init);
    };
    const om = new OMClient(BASE_URL, { apiKey: API_KEY, fetch: counting });
    const threadId = newId("ts-raw");
    await om.postTurn(threadId, [{ role: "user", text: "hello there" }], { context: "none" });
    requests = 0;
    const call = om.status(threadId);
    assert.ok(call instanceof APIPromise && call instanceof Promise);
    const { data, response } = await call.withResponse();
    assert.equal(response.status, 200);
    assert.match(response.headers.get("content-type") ?? "", /json/);
    assert.equal(data.threadId, threadId);
    assert.deepEqual(await call, data, "awaiting the call itself gives the same answer");
    assert.equal(requests, 1, "the request is sent once");
    // An error answer rejects withResponse too, typed.
    await assert.rejects(om.status(newId("ts-missing")).withResponse(), OMNotFound);
    await assert.rejects(om.status(newId("ts-missing")), OMNotFound);
    const caught = await om.thread(newId("ts-missing")).catch((e: unknown) => e);
    assert.ok(caught instanceof OMNotFound, "catch() goes through the same path");
  });

  test("health, readiness, the key's identity, models, usage and fleet", async () => {
    const om = client();
    assert.equal((await om.health()).status, "ok");
    const ready = await om.ready();
    assert.equal(ready.status, "ready");
    assert.ok("database" in ready.checks);
    const models = await om.models();
    assert.ok(models.data.some((m) => m.id.startsWith("om-actor/")), JSON.stringify(models.data));
    const usage = await om.usage();
    assert.equal(typeof usage, "object");
    const fleet = await om.fleet();
    assert.equal(fleet.executor, "inline");
  });

  test("working memory of a thread and of its resource: write, read, a stale version is a conflict", async () => {
    const om = client();
    const threadId = newId("ts-wm");
    const resourceId = newId("ts-wm-user");
    await om.setConfig(threadId, { workingMemory: { enabled: true, scope: "thread" } }, { resourceId });
    await assert.rejects(om.resourceWorkingMemory(newId("ts-wm-nobody")), OMNotFound);
    const written = await om.setWorkingMemory(threadId, "# Notes\n- likes green tea");
    assert.equal(written.scope, "thread");
    assert.equal(written.thread_id, threadId);
    const read = await om.workingMemory(threadId);
    assert.equal(read.content, "# Notes\n- likes green tea");
    assert.equal(read.updated_by, "api");
    const next = await om.setWorkingMemory(threadId, "# Notes\n- likes mint tea", { expectedVersion: read.version });
    assert.equal(next.version, read.version + 1);
    await assert.rejects(om.setWorkingMemory(threadId, "stale", { expectedVersion: read.version }), OMConflict);

    await om.setResourceConfig(resourceId, { workingMemory: { enabled: true, scope: "resource" } });
    const shared = await om.setResourceWorkingMemory(resourceId, "# Profile\n- name: Dana");
    assert.equal(shared.scope, "resource");
    assert.equal(shared.resource_id, resourceId);
    assert.equal((await om.resourceWorkingMemory(resourceId)).content, "# Profile\n- name: Dana");
  });

  test("config of a thread and of its resource; resources, threads and their pages", async () => {
    const om = client();
    const resourceId = newId("ts-res");
    const first = newId("ts-cfg");
    const second = newId("ts-cfg");
    await conversation(om, first, resourceId, 1);
    await conversation(om, second, resourceId, 1);

    type Section = Record<string, Record<string, unknown> | undefined> | null;
    const set = await om.setConfig(first, { observation: { messageTokens: 5000 } }, { resourceId });
    assert.equal((set.overrides as Section)?.observation?.messageTokens, 5000);
    assert.equal(((await om.getConfig(first)).overrides as Section)?.observation?.messageTokens, 5000);
    await assert.rejects(om.setConfig(first, { observation: { messageTokens: -1 } }), OMBadRequest);
    const cleared = await om.setConfig(first, null);
    assert.equal(cleared.overrides, null);

    const shared = await om.setResourceConfig(resourceId, { reflection: { observationTokens: 30000 } });
    assert.equal((shared.overrides as Section)?.reflection?.observationTokens, 30000);
    const read = await om.getResourceConfig(resourceId);
    assert.equal((read.overrides as Section)?.reflection?.observationTokens, 30000);
    assert.equal((await om.getConfig(second)).resource_overrides !== null, true, "the thread sees them");

    const renamed = await om.updateThread(first, { title: "Bicycles", metadata: { source: "ts" } });
    assert.equal(renamed.title, "Bicycles");
    assert.deepEqual(renamed.metadata, { source: "ts" });

    const ofResource = await om.threads(resourceId);
    assert.deepEqual(ofResource.threads.map((t) => t.thread_id).sort(), [first, second].sort());
    const page = await om.listThreads({ resourceId, limit: 1 });
    assert.equal(page.items.length, 1);
    assert.ok(page.next_cursor, "a second page");
    const all: string[] = [];
    for await (const t of om.iterThreads({ resourceId, limit: 1 })) all.push(t.thread_id);
    assert.deepEqual(all.sort(), [first, second].sort());
    const resources = await om.listResources({ q: resourceId });
    assert.deepEqual(resources.items.map((r) => r.id), [resourceId]);

    await om.deleteResource(resourceId);
    await assert.rejects(om.thread(first), OMNotFound);
    await assert.rejects(om.thread(second), OMNotFound);
  });

  test("observe and reflect on demand, edit and forget a line, and the generation's diff", async () => {
    const om = client();
    const threadId = newId("ts-ops");
    const resourceId = newId("ts-ops-user");
    // A low threshold, so the offline observer writes a log from these few messages.
    await om.setConfig(threadId, { observation: { messageTokens: 1000, bufferTokens: false } }, { resourceId });
    const things = ["umbrella", "compass", "violin", "lantern", "teapot", "kayak", "scarf", "atlas", "camera", "atlas"];
    for (const [i, thing] of things.entries()) {
      const fact = `Fact ${i}: my locker code is ${7000 + i} and I keep the ${thing} in it. `;
      await om.postTurn(threadId, [{ role: "user", text: fact.repeat(6) }], { resourceId, context: "none" });
    }
    const observed = await om.observe(threadId);
    assert.equal(observed.thread_id, threadId);
    assert.equal(observed.operation, "observation");
    assert.ok(observed.completed && !observed.error, JSON.stringify(observed));
    let log = await om.observations(threadId);
    const lines = (log.active?.observations ?? "").split("\n");
    const at = lines.findIndex((l) => l.includes("locker code is 7001"));
    assert.ok(at > 0, `the log has the facts: ${JSON.stringify(lines)}`);

    const original = lines[at] ?? "";
    const edited = await om.editObservation(threadId, at, "* Dana's locker code is 9999", { expected: original });
    assert.equal(edited.action, "update");
    log = await om.observations(threadId);
    assert.equal(log.active?.observations.split("\n")[at], "* Dana's locker code is 9999");
    await assert.rejects(
      om.editObservation(threadId, at, "* again", { expected: original }),
      OMConflict,
      "the line no longer reads as expected",
    );
    const forgotten = await om.deleteObservation(threadId, at, { expected: "* Dana's locker code is 9999" });
    assert.equal(forgotten.action, "delete");
    log = await om.observations(threadId);
    assert.ok(!log.active?.observations.includes("9999"));

    const reflected = await om.reflect(threadId, { prompt: "keep every number" });
    assert.equal(reflected.operation, "reflection");
    assert.ok(reflected.completed && reflected.applied, JSON.stringify({ ...reflected, status: null }));
    const generation = (await om.observations(threadId)).active?.generation_count ?? 0;
    assert.equal(generation, forgotten.generation_count + 1, "a reflection makes a new generation");
    const diff = await om.generationDiff(threadId, generation);
    assert.equal(diff.generation, generation);
    assert.equal(diff.previous_generation, forgotten.generation_count);
    assert.ok(diff.lines.length > 0);
  });

  test("webhooks: register, read, update, deliveries, delete; a loopback target is refused", async () => {
    const om = client();
    const refused = await om
      .createWebhook({ url: "http://127.0.0.1:9/hook", events: ["*"] })
      .catch((e: unknown) => e);
    assert.ok(refused instanceof OMBadRequest, String(refused));
    assert.equal(refused.code, "webhook_target_refused");
    assert.equal(refused.field, "body.url");

    // A public address, and an event type nothing emits: the endpoint is never called.
    const created = await om.createWebhook({
      url: "https://93.184.215.14/om-hook",
      events: ["data-ts-client-test-never-sent"],
      description: "ts client test",
    });
    assert.ok(created.secret.length > 10, "the signing secret is shown once");
    try {
      const disabled = await om.updateWebhook(created.id, { enabled: false });
      assert.equal(disabled.enabled, false);
      assert.deepEqual(disabled.events, ["data-ts-client-test-never-sent"]);
      assert.equal((await om.webhook(created.id)).description, "ts client test");
      assert.ok((await om.webhooks()).items.some((w) => w.id === created.id));
      assert.ok(Array.isArray((await om.webhookDeliveries(created.id)).items));
      const rotated = await om.rotateWebhookSecret(created.id, { keepPreviousS: 60 });
      assert.ok(rotated.secret.startsWith("whsec_") && rotated.secret !== created.secret);
      assert.ok(rotated.previous_secret_expires_at !== null, "the previous secret still signs for a while");
      assert.equal((await om.endWebhookRotation(created.id)).previous_secret_expires_at, null);
    } finally {
      await om.deleteWebhook(created.id);
    }
    await assert.rejects(om.webhook(created.id), OMNotFound);
  });

  test("export a thread, erase it, import the lines back: the same messages; a second import adds none", async () => {
    const om = client();
    const threadId = newId("ts-export");
    const resourceId = newId("ts-export-r");
    await conversation(om, threadId, resourceId, 2);
    const lines = [];
    for await (const line of om.exportThread(threadId)) lines.push(line);
    assert.equal(lines[0]?.kind, "header");
    const messages = lines.filter((l) => l.kind === "message");
    assert.equal(messages.length, 4);
    assert.equal((await collect(om.exportResource(resourceId))).filter((l) => l.kind === "thread").length, 1);
    await om.deleteThread(threadId);
    const imported = await om.importRecords(lines);
    assert.equal(imported.messages, 4);
    assert.deepEqual(
      (await om.messages(threadId)).messages.map((m) => m.id),
      messages.map((m) => m.id),
    );
    const again = await om.importRecords(lines.map((l) => JSON.stringify(l)));
    assert.equal(again.messages, 0);
    assert.equal(again.messages_skipped, 4);
    await assert.rejects(collect(om.exportThread(newId("ts-missing"))), OMNotFound);
  });

  test("the spend view: days, per thread, the budget; a thread's own", async () => {
    const om = client();
    const threadId = newId("ts-spend");
    await om.postTurn(threadId, [{ role: "user", text: "hello" }], { context: "none" });
    const tenant = await om.spend({ days: 7 });
    assert.ok(tenant.first_day <= tenant.last_day && Array.isArray(tenant.days));
    const one = await om.spend({ days: 7, threadId });
    assert.equal(one.thread_id, threadId);
    assert.deepEqual(one.threads, []);
  });

  test("a non-streaming call through the chat-completions proxy stores the turn on the thread", async () => {
    const om = client();
    const threadId = newId("ts-proxy");
    const answer = await om.chatCompletions(
      { model: "om-actor/echo", messages: [{ role: "user", content: "Where are the bicycles?" }] },
      { threadId },
    );
    assert.equal(answer.object, "chat.completion");
    assert.ok(answer.choices.length === 1, JSON.stringify(answer));
    const stored = (await om.messages(threadId)).messages.map((m) => m.role);
    assert.deepEqual(stored.sort(), ["assistant", "user"]);
  });
});
