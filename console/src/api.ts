// The BAP HTTP API as the console calls it: same origin only, with the session's credential
// (local: the HttpOnly cookie plus its CSRF header; remote: the person's bearer token, kept in
// memory only).

export interface Problem {
  status: number;
  code: string;
  detail: string;
}

export class ApiError extends Error {
  readonly problem: Problem;
  constructor(p: Problem) {
    super(`${p.status} ${p.code}: ${p.detail}`);
    this.problem = p;
  }
}

/** Credential is what every request of this session carries. */
export type Credential = { kind: "csrf"; header: string; token: string } | { kind: "bearer"; token: string };

let credential: Credential | null = null;
let onUnauthenticated: () => void = () => {};

/** useCredential sets the session's credential and what to do when the server no longer accepts it. */
export function useCredential(c: Credential, expired: () => void): void {
  credential = c;
  onUnauthenticated = expired;
}

/** expire forgets the credential and tells the page the session ended. */
export function expire(): void {
  credential = null;
  onUnauthenticated();
}

/** headers are the credential's request headers. */
export function authHeaders(): Record<string, string> {
  if (!credential) return {};
  return credential.kind === "csrf" ? { [credential.header]: credential.token } : { Authorization: `Bearer ${credential.token}` };
}

async function problemOf(resp: Response): Promise<ApiError> {
  let p: Problem = { status: resp.status, code: "unknown", detail: resp.statusText };
  try {
    const body: unknown = await resp.json();
    if (body && typeof body === "object") {
      const b = body as Partial<Problem>;
      p = { status: resp.status, code: String(b.code ?? "unknown"), detail: String(b.detail ?? "") };
    }
  } catch {
    // not a problem document
  }
  if (resp.status === 401) expire();
  return new ApiError(p);
}

/** call sends one request and decodes its JSON answer; a refusal throws ApiError. */
export async function call<T>(method: string, path: string, body?: unknown, idempotent = false): Promise<T> {
  const headers: Record<string, string> = { Accept: "application/json", ...authHeaders() };
  const init: RequestInit = { method, headers, credentials: "same-origin", cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  if (idempotent) headers["Idempotency-Key"] = crypto.randomUUID();
  const resp = await fetch(path, init);
  if (!resp.ok) throw await problemOf(resp);
  if (resp.status === 204) return undefined as T;
  return (await resp.json()) as T;
}

/** bytes fetches an artifact's content. */
export async function bytes(path: string): Promise<{ data: ArrayBuffer; type: string }> {
  const resp = await fetch(path, { headers: authHeaders(), credentials: "same-origin", cache: "no-store" });
  if (!resp.ok) throw await problemOf(resp);
  return { data: await resp.arrayBuffer(), type: resp.headers.get("Content-Type") ?? "application/octet-stream" };
}

/** sha256 is the lowercase hex SHA-256 of data. */
export async function sha256(data: ArrayBuffer): Promise<string> {
  const d = new Uint8Array(await crypto.subtle.digest("SHA-256", data));
  return Array.from(d, (b) => b.toString(16).padStart(2, "0")).join("");
}

// The wire shapes the console reads (spec/schemas; only the fields it shows).

export interface HeldRequest {
  method: string;
  url: string;
  digest?: string;
}

/** Target is what a held act aimed at (approval.requested data.target). */
export interface Target {
  role: string;
  name?: string;
}

export interface Approval {
  approval_id: string;
  task_id: string;
  state: string;
  reason: string;
  effect?: string;
  requested_by?: string;
  requested_at: string;
  expires_at: string;
  held_request?: HeldRequest;
  screenshot_artifact_id?: string;
  decision?: string;
  resolved_by?: string;
  resolved_via?: string;
}

export interface Task {
  task_id: string;
  state: string;
  goal: string;
  verification?: { state: string; reason?: string } | string;
  postcondition?: unknown;
  created_at: string;
  updated_at: string;
}

export interface TaskRow {
  task_id: string;
  state: string;
  goal: string;
  origin: string;
  verification?: string;
  created_by: string;
  created_at: string;
  updated_at: string;
}

export interface BapEvent {
  event_id: string;
  task_id: string;
  seq: number;
  type: string;
  time: string;
  actor?: { kind: string; id?: string }; // id is absent for system
  cause?: { command_id?: string; event_id?: string; reason?: string };
  data: Record<string, unknown>;
}

export interface VerifyResult {
  valid: boolean;
  sha256: string;
  artifact_id?: string;
  size?: number;
  provenance: Record<string, unknown>;
}
