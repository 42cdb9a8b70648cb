// Compile-time checks of the built declarations (tsc --noEmit -p test/tsconfig.json after the
// build); never run.
import { Client, isInterruptedCommandResponse } from "../dist/index.js";
import type { ActResponse, ActPendingApprovalResponse, InterruptedCommandResponse, ReceiptOutcome, TaskEvent, EventDataMap, NavigateRequest } from "../dist/index.js";

declare const client: Client;

export const withCredentials = new Client({
  baseUrl: "https://bap.example.com",
  clientCredentials: { tokenUrl: "https://bap.example.com/oauth2/token", clientId: "cli_1", clientSecret: "s", resource: "https://bap.example.com", scope: "bap:tasks.read" },
});

export async function signatures(): Promise<void> {
  const req: NavigateRequest = { url: "https://example.com/" };
  const nav = await client.navigate("bs_1", req, { idempotencyKey: "k" });
  // @ts-expect-error the replay of an interrupted navigate has only its receipt
  const unsure: string = nav.epoch_id;
  void unsure;
  if (isInterruptedCommandResponse(nav)) {
    const outcome: ReceiptOutcome = nav.receipt.outcome;
    // Narrowed to InterruptedCommandResponse: no result field is set.
    const none: undefined = nav.epoch_id;
    void outcome, none;
    return;
  }
  const epoch: string = nav.epoch_id;
  const acted: ActResponse | ActPendingApprovalResponse | InterruptedCommandResponse = await client.act("bs_1", { action: "click", node_id: "nd_1" });
  if ("approval" in acted) {
    const id: string = acted.approval.approval_id;
    void id;
  }
  if (!isInterruptedCommandResponse(acted)) {
    // Narrowed to the result or the held approval, the interrupted replay ruled out.
    const either: ActResponse | ActPendingApprovalResponse = acted;
    void either;
  }
  await client.closeTask("tsk_1");
  const page = await client.listTaskEvents("tsk_1", { after: 0, limit: 10 });
  const next: number | null = page.next_after;
  const blob = await client.getArtifact("art_1");
  const bytes: Uint8Array = blob.body;
  void epoch, next, bytes;
  // @ts-expect-error the body is required
  await client.navigate("bs_1");
  // @ts-expect-error unknown action
  await client.act("bs_1", { action: "eval_js" });
}

export function narrow(e: TaskEvent): string {
  switch (e.type) {
    case "task.state_changed":
      return e.data.to;
    case "navigation.committed":
      return e.data.epoch_id;
    default:
      return e.type;
  }
}

export const stateData: EventDataMap["task.state_changed"] = { from: "created", to: "admitted" };
