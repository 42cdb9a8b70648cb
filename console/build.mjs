// Builds the console into server/internal/console/dist (embedded by go:embed): type-checks the
// strict TypeScript (tsc --noEmit), bundles src/main.ts into one ES module with esbuild and copies
// the page, its style sheet and its icon. The output depends only on the sources and the pinned tools (no
// date, no path, no source map), so scripts/check-generated.sh can compare it.
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "server", "internal", "console", "dist");

execFileSync(process.execPath, [join(here, "node_modules", "typescript", "bin", "tsc"), "-p", here], { stdio: "inherit" });
rmSync(out, { recursive: true, force: true });
mkdirSync(join(out, "assets"), { recursive: true });
await esbuild.build({
  entryPoints: [join(here, "src", "main.ts")],
  outfile: join(out, "assets", "app.js"),
  bundle: true,
  format: "esm",
  target: ["chrome120", "firefox121", "safari17"],
  minify: true,
  legalComments: "none",
  charset: "utf8",
  sourcemap: false,
  logLevel: "warning",
  absWorkingDir: here,
});
copyFileSync(join(here, "src", "index.html"), join(out, "index.html"));
copyFileSync(join(here, "src", "app.css"), join(out, "assets", "app.css"));
copyFileSync(join(here, "src", "icon.svg"), join(out, "assets", "icon.svg"));
