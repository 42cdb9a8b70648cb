-- 0010 side effects judged by what leaves the browser (issue #24 item 3): an approval that holds a
-- request the page sent names that request (its method and URL; its body only by the keyed digest
-- in action_digest, as the body may hold what a person typed) and the screenshot taken when it was
-- held, so that the approver sees exactly what would leave the browser.
ALTER TABLE approval_request
    ADD COLUMN held_method text CHECK (held_method IS NULL OR held_method ~ '^[A-Za-z][A-Za-z0-9_-]{0,31}$'),
    ADD COLUMN held_url    text CHECK (held_url IS NULL OR char_length(held_url) BETWEEN 1 AND 4096),
    ADD COLUMN screenshot_artifact_id text REFERENCES artifact_reference (artifact_id),
    ADD CHECK ((held_method IS NULL) = (held_url IS NULL)),
    ADD CHECK (held_method IS NULL OR action_digest IS NOT NULL);
