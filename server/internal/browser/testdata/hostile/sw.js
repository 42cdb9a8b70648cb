// A service worker: its script is fetched by the browser itself, and its requests are its own.
const target = "{{TARGET}}";
const host = target.replace(/^http:\/\//, "");
self.addEventListener("install", () => {
  try { new WebSocket("ws://" + host + "/sw-ws"); } catch (e) {}
  fetch(target + "/sw-fetch", {mode: "no-cors"}).catch(() => {});
});
