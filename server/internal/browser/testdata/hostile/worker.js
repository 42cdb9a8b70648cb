// A dedicated worker served as text/plain (no CSP of its own): it tries a WebSocket, a fetch and
// an EventSource to the target.
const target = "{{TARGET}}";
const host = target.replace(/^http:\/\//, "");
try { new WebSocket("ws://" + host + "/worker-ws"); } catch (e) {}
fetch(target + "/worker-fetch", {mode: "no-cors"}).catch(() => {});
try { new EventSource(target + "/worker-es"); } catch (e) {}
