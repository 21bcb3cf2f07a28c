// Types of sluice-client (src/index.js).

export interface SluiceOptions {
  /** The gateway, e.g. "http://127.0.0.1:8000". Default: process.env.SLUICE_BASE_URL. */
  baseURL?: string;
  /** The API key. Default: process.env.SLUICE_API_KEY. */
  apiKey?: string;
  /** Milliseconds to wait for an answer's headers (default 120000). */
  timeout?: number;
  /** Tries after the first on 429, 503 and network failures (default 3). */
  maxRetries?: number;
  /** First retry's delay in ms, doubled each time up to maxBackoff (default 500). */
  backoff?: number;
  maxBackoff?: number;
  /** A Retry-After longer than this (ms, default 60000) is raised at once. */
  maxRetryWait?: number;
  /** Added to every request (e.g. X-Request-Id). */
  headers?: Record<string, string>;
  fetch?: typeof globalThis.fetch;
  onRetry?: (info: { attempt: number; delay: number; error: SluiceError }) => void;
}

export type Message = { role: string; content: string | unknown[] | null; [k: string]: unknown };

export interface RequestOptions {
  signal?: AbortSignal;
  /** Any other field goes into the request body (max_tokens, temperature, ...). */
  [param: string]: unknown;
}

export interface ChatCompletion {
  id?: string;
  object?: string;
  model?: string;
  choices: { index: number; message: Message; finish_reason: string | null }[];
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
  [k: string]: unknown;
}

export interface ChatCompletionChunk {
  id?: string;
  object?: string;
  choices: { index: number; delta: Partial<Message>; finish_reason: string | null }[];
  usage?: ChatCompletion["usage"] | null;
  [k: string]: unknown;
}

/** A stream's events as they arrive; final() resolves to the whole answer put together
 * (after a break, to what came). The request starts on the first iteration. */
export interface Stream<Event, Whole> extends AsyncIterableIterator<Event> {
  final(): Promise<Whole>;
}
export const Stream: { new (...args: never[]): Stream<unknown, unknown> };

/** A tool in any of the three APIs' shapes; each call sends it in its own. */
export type Tool =
  | { type: "function"; function: { name: string; description?: string; parameters?: Record<string, unknown> } }
  | { name: string; description?: string; input_schema: Record<string, unknown>; type?: "custom" }
  | { type: "function"; name: string; description?: string; parameters?: Record<string, unknown> };

/** Anthropic's Messages API (POST /v1/messages). */
export interface AnthropicMessage {
  id?: string;
  type: "message";
  role: "assistant";
  content: ({ type: "text"; text: string } | { type: "tool_use"; id: string; name: string; input: unknown } | { type: string; [k: string]: unknown })[];
  stop_reason: string | null;
  usage?: { input_tokens: number; output_tokens: number; [k: string]: unknown };
  [k: string]: unknown;
}
export interface MessagesOptions extends RequestOptions {
  max_tokens: number;
  system?: string | unknown[];
  tools?: Tool[];
  onEvent?: (event: StreamEvent) => unknown;
}

/** OpenAI's Responses API (POST /v1/responses). */
export interface ModelResponse {
  id?: string;
  object: "response";
  status?: string;
  output: { type: string; [k: string]: unknown }[];
  usage?: { input_tokens: number; output_tokens: number; total_tokens?: number; [k: string]: unknown };
  [k: string]: unknown;
}
export interface ResponsesOptions extends RequestOptions {
  instructions?: string;
  tools?: Tool[];
  onEvent?: (event: StreamEvent) => unknown;
}
export type StreamEvent = { type: string; [k: string]: unknown };

/** One tool call of an answer; result() is what the next request sends back. */
export class ToolCall {
  constructor(id: string, name: string, args: unknown, api: "chat" | "messages" | "responses");
  id: string;
  name: string;
  /** The decoded JSON arguments (the raw text when the model sent text that is not JSON). */
  arguments: unknown;
  api: "chat" | "messages" | "responses";
  result(output: unknown): Record<string, unknown>;
}
/** The tool calls of a chat completion, an Anthropic message or a response. */
export function toolCalls(answer: unknown): ToolCall[];
/** The text of a chat completion, an Anthropic message or a response. */
export function textOf(answer: unknown): string;

export type GenerateInput = string | Message[] | ({ prompt: string } & RequestOptions & { stream?: boolean; onChunk?: (piece: string) => unknown });

export class Sluice {
  constructor(options?: SluiceOptions);
  readonly baseURL: string;
  model(name: string): Model;

  generate(model: string, input: GenerateInput, options?: RequestOptions & { stream?: false; onChunk?: undefined }): Promise<string>;
  generate(model: string, input: GenerateInput, options: RequestOptions & { stream: true; onChunk?: undefined }): AsyncIterable<string>;
  generate(model: string, input: GenerateInput, options: RequestOptions & { onChunk: (piece: string) => unknown }): Promise<string>;

  chat(model: string, messages: Message[], options?: RequestOptions & { stream?: false; onChunk?: undefined; tools?: Tool[] }): Promise<ChatCompletion>;
  chat(model: string, messages: Message[], options: RequestOptions & { stream: true; onChunk?: undefined; tools?: Tool[] }): Stream<ChatCompletionChunk, ChatCompletion>;
  chat(model: string, messages: Message[], options: RequestOptions & { onChunk: (chunk: ChatCompletionChunk) => unknown; tools?: Tool[] }): Promise<ChatCompletionChunk[]>;

  /** POST /v1/messages (Anthropic's Messages API). */
  messages(model: string, messages: unknown[], options: MessagesOptions & { stream?: false; onEvent?: undefined }): Promise<AnthropicMessage>;
  messages(model: string, messages: unknown[], options: MessagesOptions & { stream: true; onEvent?: undefined }): Stream<StreamEvent, AnthropicMessage>;
  messages(model: string, messages: unknown[], options: MessagesOptions & { onEvent: (event: StreamEvent) => unknown }): Promise<AnthropicMessage>;

  /** POST /v1/responses (OpenAI's Responses API). */
  responses(model: string, input: string | unknown[], options?: ResponsesOptions & { stream?: false; onEvent?: undefined }): Promise<ModelResponse>;
  responses(model: string, input: string | unknown[], options: ResponsesOptions & { stream: true; onEvent?: undefined }): Stream<StreamEvent, ModelResponse>;
  responses(model: string, input: string | unknown[], options: ResponsesOptions & { onEvent: (event: StreamEvent) => unknown }): Promise<ModelResponse>;

  /** POST /api/v1/model/{model}/infer: the output (a list when input was one). */
  predict(model: string, input: unknown, params?: Record<string, unknown>, options?: { signal?: AbortSignal }): Promise<unknown>;
  models(): Promise<string[]>;
  request(method: string, path: string, body?: unknown, options?: { signal?: AbortSignal }): Promise<unknown>;

  /** Prefer: respond-async: the job at once (status "queued"). */
  submit(model: string, messages?: Message[] | null, options?: RequestOptions & { endpoint?: string; body?: Record<string, unknown>; callbackUrl?: string }): Promise<Job>;
  /** GET /v1/jobs/{id}. */
  job(id: string, options?: { signal?: AbortSignal }): Promise<Job>;
  /** DELETE /v1/jobs/{id}: cancel a queued job. */
  cancel(id: string, options?: { signal?: AbortSignal }): Promise<Job>;
  /** Poll until the job ends; its answer is job.result.body. */
  wait(job: string | Job, options?: { timeout?: number; poll?: number; maxPoll?: number; signal?: AbortSignal }): Promise<Job>;
}

export interface Job {
  id: string;
  object: "job";
  status: "queued" | "running" | "succeeded" | "failed" | "cancelled";
  model: string | null;
  endpoint: string;
  priority: "critical" | "standard" | "best_effort";
  attempts: number;
  created_at: number | null;
  started_at: number | null;
  finished_at: number | null;
  callback_url: string | null;
  result?: { status_code: number; content_type: string | null; body: unknown };
  error?: { code: number; type: string; message: string; [k: string]: unknown };
}

/** Check X-Sluice-Signature against the raw body with the consumer's webhook secret. */
export function verifySignature(secret: string, header: string | null | undefined, body: string | Uint8Array | ArrayBuffer, tolerance?: number, now?: number): Promise<boolean>;

export class Model {
  constructor(name: string, client?: Sluice | null);
  readonly name: string;
  readonly client: Sluice;
  generate(input: GenerateInput, options?: RequestOptions & { stream?: false; onChunk?: undefined }): Promise<string>;
  generate(input: GenerateInput, options: RequestOptions & { stream: true; onChunk?: undefined }): AsyncIterable<string>;
  generate(input: GenerateInput, options: RequestOptions & { onChunk: (piece: string) => unknown }): Promise<string>;
  chat(messages: Message[], options?: RequestOptions & { stream?: false; onChunk?: undefined; tools?: Tool[] }): Promise<ChatCompletion>;
  chat(messages: Message[], options: RequestOptions & { stream: true; onChunk?: undefined; tools?: Tool[] }): Stream<ChatCompletionChunk, ChatCompletion>;
  chat(messages: Message[], options: RequestOptions & { onChunk: (chunk: ChatCompletionChunk) => unknown; tools?: Tool[] }): Promise<ChatCompletionChunk[]>;
  messages(messages: unknown[], options: MessagesOptions & { stream?: false; onEvent?: undefined }): Promise<AnthropicMessage>;
  messages(messages: unknown[], options: MessagesOptions & { stream: true; onEvent?: undefined }): Stream<StreamEvent, AnthropicMessage>;
  messages(messages: unknown[], options: MessagesOptions & { onEvent: (event: StreamEvent) => unknown }): Promise<AnthropicMessage>;
  responses(input: string | unknown[], options?: ResponsesOptions & { stream?: false; onEvent?: undefined }): Promise<ModelResponse>;
  responses(input: string | unknown[], options: ResponsesOptions & { stream: true; onEvent?: undefined }): Stream<StreamEvent, ModelResponse>;
  responses(input: string | unknown[], options: ResponsesOptions & { onEvent: (event: StreamEvent) => unknown }): Promise<ModelResponse>;
  predict(input: unknown, params?: Record<string, unknown>, options?: { signal?: AbortSignal }): Promise<unknown>;
}

export class SluiceError extends Error {
  /** The HTTP status; null when no answer came. */
  code: number | null;
  /** The error template's type, e.g. "rate_limited" (Anthropic's on /v1/messages, e.g. "rate_limit_error"). */
  type: string | null;
  requestId: string | null;
  /** Seconds, from Retry-After or the body's retry_after. */
  retryAfter: number | null;
  body: unknown;
}
export class APIConnectionError extends SluiceError {}
export class APITimeoutError extends APIConnectionError {}
export class APIStatusError extends SluiceError {}
export class BadRequestError extends APIStatusError {}
export class AuthenticationError extends APIStatusError {}
export class PermissionDeniedError extends APIStatusError {}
export class NotFoundError extends APIStatusError {}
export class PayloadTooLargeError extends APIStatusError {}
export class RateLimitError extends APIStatusError {}
export class ContentPolicyError extends APIStatusError {}
export class InternalServerError extends APIStatusError {}
export class BackendError extends APIStatusError {}
export class ServiceUnavailableError extends APIStatusError {}
export class GatewayTimeoutError extends APIStatusError {}

export default Sluice;
