// Fails when an exported identifier of the TypeScript SDK has no TSDoc comment: every export of
// src/index.ts (what `import … from "@originweave/bap"` sees), the public members of exported
// classes and interfaces, and each wire type of components["schemas"] with its properties (their
// TSDoc is the spec's descriptions, which `make generate` requires). The inner structure
// openapi-typescript gives `paths` and `operations` (parameters, responses, content) is not
// ours to document; the operations themselves carry the spec's summaries.
//
//   node sdk-ts/test/docs.check.mjs TOOLS_NODE_MODULES   (scripts/test-sdks.sh runs it)
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const modules = process.argv[2];
if (!modules) {
  console.error("usage: docs.check.mjs TOOLS_NODE_MODULES");
  process.exit(2);
}
const ts = createRequire(path.join(modules, "noop.js"))("typescript");
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

/** Lists the undocumented exports of the module at entry, each as "where: name". */
export function undocumented(program, entry) {
  const checker = program.getTypeChecker();
  const missing = [];
  const where = (decl) => {
    const sf = decl.getSourceFile();
    const { line } = sf.getLineAndCharacterOfPosition(decl.getStart());
    return `${path.relative(root, sf.fileName)}:${line + 1}`;
  };
  const documented = (sym) => {
    if (ts.displayPartsToString(sym.getDocumentationComment(checker)).trim() !== "") return true;
    // A comment that only holds tags (`@description …`, openapi-typescript's form) counts too.
    return sym.getJsDocTags(checker).some((t) => ts.displayPartsToString(t.text ?? []).trim() !== "");
  };
  const need = (sym, name) => {
    const decl = sym.declarations?.[0];
    if (decl && !documented(sym)) missing.push(`${where(decl)}: ${name}`);
  };
  const isPublic = (decl) => {
    const flags = ts.getCombinedModifierFlags(decl);
    if (flags & (ts.ModifierFlags.Private | ts.ModifierFlags.Protected)) return false;
    return !(decl.name && ts.isPrivateIdentifier(decl.name));
  };
  // Properties of an object type written as a literal in our sources (wire types, interfaces).
  const properties = (type, name, seen) => {
    if (seen.has(type)) return;
    seen.add(type);
    if (type.isUnion()) return; // variants are checked as their own schemas
    for (const prop of checker.getPropertiesOfType(type)) {
      const decl = prop.declarations?.[0];
      if (!decl || decl.getSourceFile().fileName.includes("node_modules") || !isPublic(decl)) continue;
      need(prop, `${name}.${prop.name}`);
      const t = checker.getTypeOfSymbolAtLocation(prop, decl);
      if (decl.type && ts.isTypeLiteralNode(decl.type)) properties(t, `${name}.${prop.name}`, seen);
    }
  };
  const moduleSym = checker.getSymbolAtLocation(program.getSourceFile(entry));
  for (let sym of checker.getExportsOfModule(moduleSym)) {
    const name = sym.name;
    if (sym.flags & ts.SymbolFlags.Alias) sym = checker.getAliasedSymbol(sym);
    need(sym, name);
    const decl = sym.declarations?.[0];
    if (!decl) continue;
    if (name === "paths" || name === "operations") continue;
    if (name === "components") {
      const schemas = checker.getPropertyOfType(checker.getDeclaredTypeOfSymbol(sym), "schemas");
      const schemasType = checker.getTypeOfSymbolAtLocation(schemas, schemas.declarations[0]);
      for (const schema of checker.getPropertiesOfType(schemasType)) {
        need(schema, `components["schemas"].${schema.name}`);
        properties(checker.getTypeOfSymbolAtLocation(schema, schema.declarations[0]), schema.name, new Set());
      }
      continue;
    }
    if (ts.isClassDeclaration(decl)) {
      for (const member of decl.members) {
        if (ts.isConstructorDeclaration(member) || !member.name || !isPublic(member)) continue;
        const msym = checker.getSymbolAtLocation(member.name);
        if (msym) need(msym, `${name}.${msym.name}`);
      }
      // Inherited public members (Client's operation methods from the generated Operations).
      const base = checker.getDeclaredTypeOfSymbol(sym);
      for (const prop of checker.getPropertiesOfType(base)) {
        const pdecl = prop.declarations?.[0];
        if (!pdecl || pdecl.parent === decl || pdecl.getSourceFile().fileName.includes("node_modules")) continue;
        if (isPublic(pdecl)) need(prop, `${name}.${prop.name}`);
      }
    } else if (ts.isInterfaceDeclaration(decl)) {
      properties(checker.getDeclaredTypeOfSymbol(sym), name, new Set());
    }
  }
  return [...new Set(missing)];
}

function programOf(files, options) {
  return ts.createProgram(files, { ...options, noEmit: true });
}

// The check must be able to fail: a module with one undocumented item of each kind.
{
  const host = ts.createCompilerHost({});
  const src = [
    "/** Doc. */",
    "export interface I {",
    "  /** Documented. */",
    "  a: string;",
    "  b: number;",
    "}",
    "export const c = 1;",
    "/** Doc. */",
    "export class K {",
    "  m(): void {}",
    "  #p = 1;",
    "  private q = 2;",
    "  /** Documented. */",
    "  r = 3;",
    "}",
    "/** Doc. */",
    "export interface components {",
    "  schemas: {",
    "    /** Documented. */",
    "    S: {",
    "      /** @description Documented. */",
    "      x: string;",
    "      y: string;",
    "    };",
    "  };",
    "}",
    "",
  ].join("\n");
  const file = path.join(root, "__probe.ts");
  const orig = host.getSourceFile;
  host.getSourceFile = (f, ...rest) => (f === file ? ts.createSourceFile(f, src, ts.ScriptTarget.ES2022, true) : orig.call(host, f, ...rest));
  host.fileExists = ((fe) => (f) => f === file || fe(f))(host.fileExists);
  const got = undocumented(ts.createProgram([file], { noEmit: true, types: [] }, host), file).map((s) => s.split(": ")[1]);
  const want = ["I.b", "c", "K.m", "S.y"];
  if (JSON.stringify(got.sort()) !== JSON.stringify(want.sort())) {
    console.error(`docs.check: the probe found ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
    process.exit(1);
  }
}

const config = ts.getParsedCommandLineOfConfigFile(path.join(root, "tsconfig.json"), {}, { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} });
const entry = path.join(root, "src", "index.ts");
const missing = undocumented(programOf(config.fileNames, config.options), entry);
if (missing.length > 0) {
  console.error(`sdk-ts: ${missing.length} exported identifiers without TSDoc:`);
  for (const m of missing) console.error(`  ${m}`);
  process.exit(1);
}
console.log("sdk-ts: every exported identifier has TSDoc");
