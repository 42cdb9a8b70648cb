-- 0021 who decided an approval, as a workload (issue #23 item 6, ADR 0031). approval_decision
-- named the approver (decided_by) and the channel, never the workload (OAuth client) the decision
-- came through, and the local profile's callers had none. Every decision recorded from now on
-- names it. The requirement is NOT VALID: the rows written before this migration keep their NULL
-- (their workload was never known, and the table is append-only), while the database refuses
-- every new decision, approver's or correction, that names none.
ALTER TABLE approval_decision
    ADD COLUMN decided_client text CHECK (decided_client IS NULL OR char_length(decided_client) BETWEEN 1 AND 255);
ALTER TABLE approval_decision
    ADD CONSTRAINT approval_decision_workload_required CHECK (decided_client IS NOT NULL) NOT VALID;
-- The view's d.* was expanded when it was created (0013): recreated, it has the new column.
CREATE OR REPLACE VIEW approval_decision_current AS
    SELECT d.* FROM approval_decision d
    WHERE NOT EXISTS (SELECT 1 FROM approval_decision n WHERE n.supersedes = d.decision_id);
