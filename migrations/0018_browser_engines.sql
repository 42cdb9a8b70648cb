-- 0018 browser engines (issue #19, ADR 0025): every browser session records the engine it runs on
-- and its browser's version when it opened. A checkpoint restores only into its session's engine,
-- which it reads through its session (task_checkpoint.session_id), so the engine is stored once.
-- Sessions recorded before engines existed ran on Chromium; their version was not kept ('').
ALTER TABLE browser_session
    ADD COLUMN engine text NOT NULL DEFAULT 'chromium' CHECK (engine IN ('chromium', 'firefox')),
    ADD COLUMN engine_version text NOT NULL DEFAULT '' CHECK (char_length(engine_version) <= 100);
ALTER TABLE browser_session ALTER COLUMN engine DROP DEFAULT;
