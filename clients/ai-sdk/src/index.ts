/**
 * om as memory for the Vercel AI SDK (`ai` 6): a language-model middleware.
 *
 *     import { generateText, wrapLanguageModel } from "ai";
 *     import { omMemory } from "@om/ai-sdk";
 *
 *     const model = wrapLanguageModel({
 *       model: openai("gpt-4o-mini"),
 *       middleware: omMemory({ threadId: "t-1", resourceId: "user-7" }), // OM_BASE_URL, OM_API_KEY
 *     });
 *     const { text } = await generateText({ model, prompt: "Hi, I'm Dana" });
 *
 * Each model call (generate or stream) does what the om API asks of a chat backend:
 *
 * 1. the turn's new messages (the prompt's trailing user and tool messages) are posted to om
 *    (`POST /v1/threads/{id}/turns`, `context: "openai"`);
 * 2. the prompt is replaced by om's context for the thread: the app's own system messages, then om's
 *    memory (observations, working memory), then the messages not yet observed; so the app sends only
 *    the new message and om keeps the history;
 * 3. the model's reply (its text and tool calls; for a stream, once the stream has finished) is posted
 *    with `context: "none"`.
 *
 * Why a middleware rather than a provider: it composes with any model the app already uses, and the AI
 * SDK's own `wrapLanguageModel` keeps streaming, tools and telemetry working unchanged.
 */
import type {
  LanguageModelV3CallOptions,
  LanguageModelV3Content,
  LanguageModelV3Message,
  LanguageModelV3Middleware,
  LanguageModelV3Prompt,
  LanguageModelV3StreamPart,
  LanguageModelV3ToolResultOutput,
} from "@ai-sdk/provider";
import { type MessageInput, OMClient, type OMClientOptions, type TurnResponse } from "@om/client";

export interface OMMemoryOptions {
  /** The thread the conversation is stored on; a call can name another with
   * `providerOptions: { om: { threadId } }`. One of the two is required. */
  threadId?: string;
  /** The user or entity the thread belongs to (the server's default: the thread id). */
  resourceId?: string;
  /** The om client to use; default a new `OMClient` with `clientOptions` (which read `OM_BASE_URL` and
   * `OM_API_KEY` when they do not say). */
  client?: OMClient;
  clientOptions?: OMClientOptions;
  /** The chat model's name for om (`provider/model`), used for its token budgets; default none. */
  actorModel?: string;
}

/** Per call, in `providerOptions.om`: overrides the middleware's own. */
export interface OMCallOptions {
  threadId?: string;
  resourceId?: string;
}

interface Turn {
  threadId: string;
  resourceId: string | undefined;
  /** Whether this call's prompt ended with tool results (a later step of a tool loop). */
  stepNumber: number;
}

/** The middleware; see the module's comment for what a call does. */
export function omMemory(options: OMMemoryOptions = {}): LanguageModelV3Middleware {
  let client = options.client;
  const om = (): OMClient => (client ??= new OMClient(options.clientOptions ?? {}));
  const turns = new WeakMap<LanguageModelV3CallOptions, Turn>();

  const post = (turn: Turn, messages: MessageInput[], context: "openai" | "none", turnEnd?: boolean) =>
    om().postTurn(turn.threadId, messages, {
      resourceId: turn.resourceId,
      context,
      stepNumber: turn.stepNumber,
      ...(turnEnd === undefined ? {} : { turnEnd }),
      ...(options.actorModel === undefined ? {} : { actorModel: options.actorModel }),
    });

  return {
    specificationVersion: "v3",

    async transformParams({ params }) {
      const asked = (params.providerOptions?.om ?? {}) as OMCallOptions;
      const threadId = asked.threadId ?? options.threadId;
      if (!threadId) {
        throw new TypeError(
          "omMemory needs a thread: omMemory({ threadId }) or providerOptions: { om: { threadId } }",
        );
      }
      const fresh = newMessages(params.prompt);
      const turn: Turn = {
        threadId,
        resourceId: asked.resourceId ?? options.resourceId,
        stepNumber: fresh.some((m) => m.role === "tool") ? 1 : 0,
      };
      const answer = await post(turn, fresh, "openai");
      const next: LanguageModelV3CallOptions = { ...params, prompt: promptFrom(params.prompt, answer) };
      turns.set(next, turn);
      return next;
    },

    async wrapGenerate({ doGenerate, params }) {
      const result = await doGenerate();
      const turn = turns.get(params);
      if (turn !== undefined) {
        const reply = replyOf(result.content);
        if (reply !== null) await post(turn, [reply.message], "none", !reply.toolCalls);
      }
      return result;
    },

    async wrapStream({ doStream, params }) {
      const { stream, ...rest } = await doStream();
      const turn = turns.get(params);
      if (turn === undefined) return { stream, ...rest };
      const content: LanguageModelV3Content[] = [];
      const texts = new Map<string, string>();
      const collect = new TransformStream<LanguageModelV3StreamPart, LanguageModelV3StreamPart>({
        transform(part, controller) {
          if (part.type === "text-delta") texts.set(part.id, (texts.get(part.id) ?? "") + part.delta);
          else if (part.type === "text-end") {
            content.push({ type: "text", text: texts.get(part.id) ?? "" });
            texts.delete(part.id);
          } else if (part.type === "tool-call") content.push(part);
          controller.enqueue(part);
        },
        async flush() {
          // Text never ended (a provider that sends no text-end): still the reply.
          for (const text of texts.values()) content.push({ type: "text", text });
          const reply = replyOf(content);
          // A failure here fails the stream: the reply would otherwise be missing from memory unseen.
          if (reply !== null) await post(turn, [reply.message], "none", !reply.toolCalls);
        },
      });
      return { stream: stream.pipeThrough(collect), ...rest };
    },
  };
}

// ----------------------------------------------------------------------------- the prompt, to om

/** The turn's new messages: the prompt's trailing user and tool messages (after its last assistant
 * message), in om's form. The earlier ones are om's to keep: it stored them on earlier calls. */
export function newMessages(prompt: LanguageModelV3Prompt): MessageInput[] {
  let start = prompt.length;
  while (start > 0 && (prompt[start - 1]?.role === "user" || prompt[start - 1]?.role === "tool")) start--;
  return prompt.slice(start).flatMap((message) => {
    const converted = toOM(message);
    return converted === null ? [] : [converted];
  });
}

function toOM(message: LanguageModelV3Message): MessageInput | null {
  if (message.role === "user") {
    const text = message.content
      .map((part) => (part.type === "text" ? part.text : `[${part.mediaType} ${part.filename ?? "file"}]`))
      .join("\n");
    return { role: "user", text };
  }
  if (message.role === "tool") {
    const parts = message.content.flatMap((part) =>
      part.type === "tool-result"
        ? [
            {
              type: "tool-invocation",
              state: "result" as const,
              toolCallId: part.toolCallId,
              toolName: part.toolName,
              result: outputValue(part.output),
            },
          ]
        : [],
    );
    return parts.length === 0 ? null : { role: "tool", parts };
  }
  return null;
}

function outputValue(output: LanguageModelV3ToolResultOutput): unknown {
  return "value" in output ? output.value : (output as { reason?: string }).reason ?? null;
}

/** The model's reply in om's form, or null when it said nothing (no text, no tool call). */
function replyOf(content: LanguageModelV3Content[]): { message: MessageInput; toolCalls: boolean } | null {
  const text = content.flatMap((part) => (part.type === "text" ? [part.text] : [])).join("");
  const calls = content.flatMap((part) =>
    part.type === "tool-call"
      ? [
          {
            type: "tool-invocation",
            state: "call" as const,
            toolCallId: part.toolCallId,
            toolName: part.toolName,
            args: parseInput(part.input),
          },
        ]
      : [],
  );
  if (calls.length === 0) return text === "" ? null : { message: { role: "assistant", text }, toolCalls: false };
  const parts = [...(text === "" ? [] : [{ type: "text", text }]), ...calls];
  return { message: { role: "assistant", parts }, toolCalls: true };
}

function parseInput(input: string): unknown {
  try {
    return JSON.parse(input);
  } catch {
    return input;
  }
}

// --------------------------------------------------------------------------- om's context, to the model

type OpenAIMessage = {
  role?: unknown;
  content?: unknown;
  tool_calls?: Array<{ id?: unknown; function?: { name?: unknown; arguments?: unknown } }>;
  tool_call_id?: unknown;
};

/** The prompt the model gets: the app's system messages, then om's context (`openai_messages`). */
export function promptFrom(original: LanguageModelV3Prompt, answer: TurnResponse): LanguageModelV3Prompt {
  const system = original.filter((m) => m.role === "system");
  const toolNames = new Map<string, string>();
  const out: LanguageModelV3Prompt = [...system];
  for (const raw of (answer.context?.openai_messages ?? []) as OpenAIMessage[]) {
    const text = textOf(raw.content);
    if (raw.role === "system") out.push({ role: "system", content: text });
    else if (raw.role === "user") out.push({ role: "user", content: [{ type: "text", text }] });
    else if (raw.role === "assistant") {
      const content: Extract<LanguageModelV3Message, { role: "assistant" }>["content"] = [];
      if (text !== "") content.push({ type: "text", text });
      for (const call of raw.tool_calls ?? []) {
        const toolCallId = String(call.id ?? "");
        const toolName = String(call.function?.name ?? "");
        toolNames.set(toolCallId, toolName);
        content.push({ type: "tool-call", toolCallId, toolName, input: parseInput(String(call.function?.arguments ?? "{}")) });
      }
      out.push({ role: "assistant", content });
    } else if (raw.role === "tool") {
      const toolCallId = String(raw.tool_call_id ?? "");
      out.push({
        role: "tool",
        content: [{ type: "tool-result", toolCallId, toolName: toolNames.get(toolCallId) ?? "", output: { type: "text", value: text } }],
      });
    }
  }
  return out;
}

/** Chat-completions content as text: a string, or the text of its parts. */
function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .map((part: { type?: unknown; text?: unknown }) => (part?.type === "text" ? String(part.text ?? "") : ""))
    .join("");
}
