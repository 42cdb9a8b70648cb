import type { BapEvent } from "../api";

/** View is a page of the console: it follows live events until it is closed. */
export interface View {
  onEvent(e: BapEvent): void;
  close(): void;
}
