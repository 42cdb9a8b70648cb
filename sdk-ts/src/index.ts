/**
 * BAP SDK for TypeScript / JavaScript (Node >= 20, ESM, zero runtime dependencies).
 *
 * ```ts
 * import { Client, ProblemError } from "@originweave/bap";
 * const client = new Client({ baseUrl: "http://127.0.0.1:7777" });
 * const { task } = await client.createTask({ goal: "…", policy: { allowed_origins: ["https://example.com"] } });
 * try {
 *   await client.navigate(sessionId, { url: "https://example.com/" });
 * } catch (e) {
 *   if (e instanceof ProblemError && e.code === "origin_not_allowed") { … }
 * }
 * ```
 *
 * Methods (client.gen.ts) are the operationIds in camelCase: path parameters first, then the
 * body, then `{ idempotencyKey?, signal? }`. Mutating calls send an Idempotency-Key (the given one,
 * else `crypto.randomUUID()`) and reuse it on the client's own retries.
 */

import { Operations } from "./client.gen.js";
import type { Event, Problem } from "./client.gen.js";

export * from "./client.gen.js";
export * from "./events.gen.js";
export type { components, operations, paths } from "./schema.gen.js";

/** Options of `new Client(…)`. */
export interface ClientOptions {
  /** e.g. `http://127.0.0.1:7777` (a path prefix is kept). */
  baseUrl: string;
  /** Bearer token (remote profile), or a function returning one before every attempt. */
  token?: string | (() => string | undefined | Promise<string | undefined>);
  /**
   * OAuth 2.0 client credentials (remote profile): the client asks the token endpoint for an
   * access token bound to `resource` and caches it until shortly before it expires. Takes the
   * place of `token`.
   */
  clientCredentials?: ClientCredentialsOptions;
  /** The fetch implementation (default: the global `fetch`). */
  fetch?: typeof fetch;
  /** Attempts per call in all (default 3; 1 disables retries). */
  maxAttempts?: number;
  /** Headers sent on every request. */
  headers?: Record<string, string>;
}

/** Options of the client credentials grant (`new Client({ baseUrl, clientCredentials })`). */
export interface ClientCredentialsOptions {
  /** The token endpoint, e.g. `https://bap.example.com/oauth2/token`. */
  tokenUrl: string;
  /** The OAuth client's id. */
  clientId: string;
  /** The OAuth client's secret; it is sent only to the token endpoint. */
  clientSecret: string;
  /** RFC 8707 resource indicator: the BAP server's URL, e.g. `https://bap.example.com`. */
  resource?: string;
  /** Scopes to narrow the token to (absent: every scope the client was registered with). */
  scope?: string | string[];
  /** The clock in ms (default `Date.now`); tests move it. */
  now?: () => number;
}

/** An error answer of the token endpoint (RFC 6749 §5.2). */
export class TokenError extends Error {
  /** The HTTP status of the answer. */
  readonly status: number;
  /** The OAuth error code (`"invalid_client"`, `"invalid_target"`, …), if any. */
  readonly code: string | undefined;
  /** The answer's `error_description`, if any. */
  readonly description: string | undefined;

  constructor(status: number, code?: string, description?: string) {
    super(`bap: token endpoint: ${status}${code ? ` ${code}` : ""}${description ? `: ${description}` : ""}`);
    this.name = "TokenError";
    this.status = status;
    this.code = code;
    this.description = description;
  }
}

/**
 * A cached OAuth 2.0 client credentials token source (RFC 6749 §4.4, client_secret_basic, RFC 8707
 * `resource`). `token()` returns the cached access token, or fetches a new one when none is cached
 * or it expires within a quarter of its lifetime (at most 30 s); concurrent callers share one
 * request.
 */
export class ClientCredentials {
  readonly #options: ClientCredentialsOptions;
  readonly #fetch: typeof fetch;
  #token: string | undefined;
  #refreshAt = 0;
  #pending: Promise<string> | undefined;

  constructor(options: ClientCredentialsOptions, fetchImpl: typeof fetch = globalThis.fetch.bind(globalThis)) {
    this.#options = options;
    this.#fetch = fetchImpl;
  }

  /** The cached access token, or a new one when none is cached or it is about to expire. */
  async token(): Promise<string> {
    const now = (this.#options.now ?? Date.now)();
    if (this.#token !== undefined && now < this.#refreshAt) return this.#token;
    this.#pending ??= this.#request(now).finally(() => {
      this.#pending = undefined;
    });
    return this.#pending;
  }

  /** Drops the cached token: the next `token()` asks for a new one. */
  invalidate(): void {
    this.#token = undefined;
    this.#refreshAt = 0;
  }

  async #request(now: number): Promise<string> {
    const o = this.#options;
    const form = new URLSearchParams({ grant_type: "client_credentials" });
    if (o.resource) form.set("resource", o.resource);
    const scope = Array.isArray(o.scope) ? o.scope.join(" ") : o.scope;
    if (scope) form.set("scope", scope);
    // RFC 6749 §2.3.1: the client id and secret are form-urlencoded before Basic encoding.
    const basic = btoa(`${encodeURIComponent(o.clientId)}:${encodeURIComponent(o.clientSecret)}`);
    const res = await this.#fetch(o.tokenUrl, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", accept: "application/json", authorization: `Basic ${basic}` },
      body: form.toString(),
    });
    const text = await res.text();
    let doc: Record<string, unknown> = {};
    try {
      const v: unknown = JSON.parse(text);
      if (v !== null && typeof v === "object" && !Array.isArray(v)) doc = v as Record<string, unknown>;
    } catch {
      doc = {};
    }
    const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);
    if (res.status !== 200) throw new TokenError(res.status, str(doc["error"]), str(doc["error_description"]));
    const token = str(doc["access_token"]);
    const type = str(doc["token_type"]);
    if (!token || (type !== undefined && type.toLowerCase() !== "bearer")) {
      throw new TokenError(res.status, undefined, "the answer holds no bearer access_token");
    }
    const expiresIn = typeof doc["expires_in"] === "number" && doc["expires_in"] > 0 ? doc["expires_in"] * 1000 : 60_000;
    this.#token = token;
    this.#refreshAt = now + expiresIn - Math.min(expiresIn / 4, 30_000);
    return token;
  }
}

/** What the client saw of the final answer of a call (see `CallOptions.onResponse`). */
export interface ResponseInfo {
  /** The HTTP status of the final answer. */
  status: number;
  /** The headers of the final answer. */
  headers: Headers;
  /** `Idempotent-Replayed: true`: a replay of an earlier request with the same key. */
  replayed: boolean;
  /** The Idempotency-Key sent (mutating calls only). */
  idempotencyKey?: string;
  /** How many attempts the call took, the final one included. */
  attempts: number;
}

/** Options of one call. */
export interface CallOptions {
  /** Idempotency-Key of a mutating call (default: a new UUID). Read-only calls ignore it. */
  idempotencyKey?: string;
  /** Aborts the call (and its retries). */
  signal?: AbortSignal;
  /** Extra headers for this call. */
  headers?: Record<string, string>;
  /** Called with the status and headers of the final answer (a problem included). */
  onResponse?: (info: ResponseInfo) => void;
}

/** One operation call, as the generated methods describe it. */
export interface RequestSpec {
  /** The operationId (`create_task`, …), named in errors. */
  op: string;
  /** The HTTP method. */
  method: "GET" | "POST";
  /** The path below `baseUrl`, parameters filled in and escaped. */
  path: string;
  /** The JSON request body, sent as it is. */
  body?: unknown;
  /** Query parameters; `undefined` ones are left out. */
  query?: Record<string, string | number | boolean | undefined>;
  /** True for a mutating operation: the call sends an Idempotency-Key. */
  mutating?: boolean;
}

/** The answer of `getArtifact`: the bytes, their media type and SHA-256 digest. */
export interface ArtifactBlob {
  /** The artifact's bytes. */
  body: Uint8Array;
  /** The artifact's media type (`Content-Type`). */
  mediaType: string;
  /** Lowercase hex SHA-256 of `body`, checked against `Repr-Digest` when the server sent it. */
  sha256: string;
  /** The `Repr-Digest` header as sent (`sha-256=:<base64>:`). */
  reprDigest?: string;
}

/**
 * An error answer of the server: an RFC 9457 problem. `code` is the stable machine code
 * (`"not_found"`, …), or `undefined` when the answer was not a problem document.
 */
export class ProblemError extends Error {
  /** The HTTP status of the answer. */
  readonly status: number;
  /** The problem's stable `code`, or `undefined` when the answer was not a problem document. */
  readonly code: string | undefined;
  /** The problem's `title`, if any. */
  readonly title: string | undefined;
  /** The problem's `detail`, if any. */
  readonly detail: string | undefined;
  /** The problem's `type` URI, if any. */
  readonly type: string | undefined;
  /** The decoded problem document (with `errors` or `receipt` when present). */
  readonly problem: Partial<Problem> | undefined;
  /** The raw answer body. */
  readonly body: string;
  /** The answer's headers (`Retry-After`, …). */
  readonly headers: Headers;

  constructor(status: number, body: string, headers: Headers) {
    let problem: Partial<Problem> | undefined;
    const ctype = (headers.get("content-type") ?? "").split(";")[0]!.trim().toLowerCase();
    if (ctype === "application/problem+json" || ctype === "application/json") {
      try {
        const doc: unknown = JSON.parse(body);
        if (doc !== null && typeof doc === "object" && !Array.isArray(doc)) {
          problem = doc as Partial<Problem>;
        }
      } catch {
        problem = undefined;
      }
    }
    const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);
    const code = str(problem?.code);
    const detail = str(problem?.detail);
    const title = str(problem?.title);
    super(`bap: ${status}${code ? ` ${code}` : ""}${detail ? `: ${detail}` : title ? `: ${title}` : ""}`);
    this.name = "ProblemError";
    this.status = status;
    this.code = code;
    this.title = title;
    this.detail = detail;
    this.type = str(problem?.type);
    this.problem = problem;
    this.body = body;
    this.headers = headers;
  }
}

/** The bytes of an artifact do not match the `Repr-Digest` the server sent. */
export class DigestMismatchError extends Error {
  constructor(op: string) {
    super(`bap: ${op}: artifact bytes do not match Repr-Digest`);
    this.name = "DigestMismatchError";
  }
}

const MAX_WAIT_MS = 30_000;

/** Options of `client.subscribe(taskId, …)`. */
export interface SubscribeOptions {
  /** Yield events with seq > after (default 0: from the first). */
  after?: number;
  /** Ends the subscription (the iterator then finishes without an error). */
  signal?: AbortSignal;
}

/** Options of `client.subscribeAll(…)`. */
export interface SubscribeAllOptions {
  /** Resume after this opaque cursor (`event.cursor` of an earlier event); absent: from now. */
  cursor?: string;
  /** Ends the subscription (the iterator then finishes without an error). */
  signal?: AbortSignal;
}

/** A client of one BAP server. */
export class Client extends Operations {
  /** The server's base URL, without a trailing slash. */
  readonly baseUrl: string;
  /** Attempts per call in all (1: no retries). */
  readonly maxAttempts: number;
  readonly #token: ClientOptions["token"];
  readonly #credentials: ClientCredentials | undefined;
  readonly #fetch: typeof fetch;
  readonly #headers: Record<string, string>;
  /** Wait in ms before retry n (1-based) when the answer gives no Retry-After. */
  backoff: (n: number) => number = defaultBackoff;

  constructor(options: ClientOptions) {
    super();
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.maxAttempts = Math.max(1, Math.floor(options.maxAttempts ?? 3));
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    if (options.clientCredentials) {
      const cc = new ClientCredentials(options.clientCredentials, this.#fetch);
      this.#credentials = cc;
      this.#token = () => cc.token();
    } else {
      this.#token = options.token;
    }
    this.#headers = { ...options.headers };
  }

  protected async request<T>(spec: RequestSpec, options?: CallOptions): Promise<T> {
    const res = await this.#send(spec, "application/json", options);
    const text = new TextDecoder().decode(res.body);
    return (text === "" ? undefined : JSON.parse(text)) as T;
  }

  protected async requestBlob(spec: RequestSpec, options?: CallOptions): Promise<ArtifactBlob> {
    const res = await this.#send(spec, "*/*", options);
    const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", res.body));
    const reprDigest = res.headers.get("repr-digest") ?? undefined;
    const want = reprDigest ? reprSha256(reprDigest) : undefined;
    if (want && !equalBytes(want, digest)) {
      throw new DigestMismatchError(spec.op);
    }
    return {
      body: res.body,
      mediaType: res.headers.get("content-type") ?? "application/octet-stream",
      sha256: Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join(""),
      ...(reprDigest === undefined ? {} : { reprDigest }),
    };
  }

  /**
   * Follows one task's events with seq > `after` over Server-Sent Events, as an async iterator
   * that resumes by itself: when the connection drops or the server restarts it reconnects with
   * the last seq it yielded (`Last-Event-ID`), so each event is yielded exactly once, in seq
   * order. A problem a reconnect cannot fix (400, 401, 403, 404) is thrown as a `ProblemError`.
   *
   * ```ts
   * for await (const ev of client.subscribe(taskId, { after: 0 })) console.log(ev.seq, ev.type);
   * ```
   */
  subscribe(taskId: string, options: SubscribeOptions = {}): AsyncGenerator<Event, void, undefined> {
    let last = options.after ?? 0;
    return this.#follow(
      `/bap/v1/tasks/${encodeURIComponent(taskId)}/events/stream`,
      () => String(last),
      (_id, ev) => {
        if (ev === undefined || ev.seq <= last) return false;
        last = ev.seq;
        return true;
      },
      options.signal,
    );
  }

  /**
   * Follows every event of every task the caller may see, after `cursor` (absent: from now), with
   * the same resuming behaviour as `subscribe`. Events of one task come in seq order.
   */
  subscribeAll(options: SubscribeAllOptions = {}): AsyncGenerator<Event, void, undefined> {
    let last = options.cursor ?? "";
    return this.#follow(
      "/bap/v1/events/stream",
      () => last,
      (id, ev) => {
        if (id === undefined) return false;
        last = id;
        return ev !== undefined;
      },
      options.signal,
    );
  }

  async *#follow(
    path: string,
    cursor: () => string,
    accept: (id: string | undefined, ev: Event | undefined) => boolean,
    signal: AbortSignal | undefined,
  ): AsyncGenerator<Event, void, undefined> {
    let failures = 0;
    for (;;) {
      let progressed = false;
      let wait: number | undefined;
      try {
        const headers: Record<string, string> = { ...this.#headers, accept: "text/event-stream" };
        const c = cursor();
        if (c !== "") headers["last-event-id"] = c;
        const token = typeof this.#token === "function" ? await this.#token() : this.#token;
        if (token) headers["authorization"] = `Bearer ${token}`;
        const res = await this.#fetch(this.baseUrl + path, { method: "GET", headers, ...(signal ? { signal } : {}) });
        if (res.status !== 200 || res.body === null) {
          const problem = new ProblemError(res.status, await res.text(), res.headers);
          if (res.status !== 429 && res.status < 500) throw new FatalStreamError(problem);
          wait = retryAfterMs(res.headers.get("retry-after"));
        } else {
          for await (const [id, ev] of parseSSE(res.body)) {
            if (!accept(id, ev)) continue;
            progressed = true;
            yield ev as Event;
          }
        }
      } catch (err) {
        if (signal?.aborted) return;
        if (err instanceof FatalStreamError) throw err.problem;
        // A dropped connection or a failed connect: reconnect below.
      }
      if (signal?.aborted) return;
      failures = progressed ? 1 : failures + 1;
      try {
        await sleep(Math.min(wait ?? this.backoff(failures), MAX_WAIT_MS), signal);
      } catch {
        return;
      }
    }
  }

  async #send(spec: RequestSpec, accept: string, options: CallOptions = {}): Promise<{ status: number; headers: Headers; body: Uint8Array<ArrayBuffer> }> {
    let url = this.baseUrl + spec.path;
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(spec.query ?? {})) {
      if (v !== undefined) params.set(k, String(v));
    }
    const qs = params.toString();
    if (qs !== "") url += "?" + qs;
    const headers: Record<string, string> = { ...this.#headers, ...options.headers, accept };
    let payload: string | undefined;
    if (spec.body !== undefined) {
      payload = JSON.stringify(spec.body);
      // Always application/json, whatever extra headers say: the server answers any other
      // Content-Type of a body with 415 unsupported_media_type.
      for (const k of Object.keys(headers)) if (k.toLowerCase() === "content-type") delete headers[k];
      headers["content-type"] = "application/json";
    }
    let key: string | undefined;
    if (spec.mutating) {
      key = options.idempotencyKey ?? crypto.randomUUID();
      headers["idempotency-key"] = key;
    }
    let reauthenticated = false;
    for (let attempt = 1; ; attempt++) {
      const token = typeof this.#token === "function" ? await this.#token() : this.#token;
      if (token) headers["authorization"] = `Bearer ${token}`;
      let res: Response;
      let body: Uint8Array<ArrayBuffer>;
      try {
        res = await this.#fetch(url, {
          method: spec.method,
          headers,
          ...(payload === undefined ? {} : { body: payload }),
          ...(options.signal ? { signal: options.signal } : {}),
        });
        body = new Uint8Array(await res.arrayBuffer());
      } catch (err) {
        if (options.signal?.aborted || attempt >= this.maxAttempts) throw err;
        await sleep(this.backoff(attempt), options.signal);
        continue;
      }
      options.onResponse?.({
        status: res.status,
        headers: res.headers,
        replayed: res.headers.get("idempotent-replayed") === "true",
        ...(key === undefined ? {} : { idempotencyKey: key }),
        attempts: attempt,
      });
      if (res.status >= 200 && res.status < 300) {
        return { status: res.status, headers: res.headers, body };
      }
      const problem = new ProblemError(res.status, new TextDecoder().decode(body), res.headers);
      if (res.status === 401 && this.#credentials && !reauthenticated) {
        // The cached token was revoked or expired early: once more with a fresh one.
        reauthenticated = true;
        this.#credentials.invalidate();
        continue;
      }
      if (attempt < this.maxAttempts && retryable(problem)) {
        const wait = retryAfterMs(res.headers.get("retry-after")) ?? this.backoff(attempt);
        if (wait <= MAX_WAIT_MS) {
          await sleep(wait, options.signal);
          continue;
        }
      }
      throw problem;
    }
  }
}

/** Carries a problem out of the reconnect loop's catch. */
class FatalStreamError extends Error {
  constructor(readonly problem: ProblemError) {
    super(problem.message);
  }
}

/** Parses a Server-Sent Events body into [id, event] pairs (id-only messages give an undefined event). */
async function* parseSSE(body: ReadableStream<Uint8Array>): AsyncGenerator<[string | undefined, Event | undefined], void, undefined> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  let id: string | undefined;
  let data: string | undefined;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, "");
        buf = buf.slice(nl + 1);
        if (line === "") {
          if (id !== undefined || data !== undefined) {
            yield [id, data === undefined ? undefined : (JSON.parse(data) as Event)];
          }
          id = undefined;
          data = undefined;
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "id") id = value;
        else if (field === "data") data = data === undefined ? value : data + "\n" + value;
      }
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}

function retryable(p: ProblemError): boolean {
  return p.status === 429 || p.status === 503 || (p.status === 409 && p.code === "idempotency_in_flight");
}

function retryAfterMs(h: string | null): number | undefined {
  if (h === null) return undefined;
  const v = h.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const t = Date.parse(v);
  return Number.isNaN(t) ? undefined : Math.max(0, t - Date.now());
}

function defaultBackoff(n: number): number {
  const d = Math.min(250 * 2 ** Math.min(n - 1, 5), 5000);
  return d + Math.random() * (d / 4);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function reprSha256(h: string): Uint8Array | undefined {
  for (const member of h.split(",")) {
    const [k, ...rest] = member.trim().split("=");
    if (k?.toLowerCase() !== "sha-256") continue;
    const b64 = rest.join("=").replace(/^:|:$/g, "");
    try {
      const bin = atob(b64);
      if (bin.length === 32) return Uint8Array.from(bin, (c) => c.charCodeAt(0));
    } catch {
      continue;
    }
  }
  return undefined;
}

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}
