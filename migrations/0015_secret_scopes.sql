-- 0015 the secrets' capabilities (issue #17, ADR 0017): bap:secrets.read (an agent lists the secret
-- names its task may use) and bap:secrets.write (the operator's secrets API) are capabilities a
-- client may be registered with. 0003's CHECK listed only the contract's eight, so `bap client
-- create` with its default capabilities (which include bap:secrets.read) was refused.
ALTER TABLE oauth_client_scope DROP CONSTRAINT oauth_client_scope_scope_check;
ALTER TABLE oauth_client_scope ADD CONSTRAINT oauth_client_scope_scope_check CHECK (scope IN (
    'bap:tasks.read', 'bap:tasks.write', 'bap:browser.observe', 'bap:browser.act',
    'bap:approvals.request', 'bap:approvals.resolve', 'bap:artifacts.read', 'bap:events.read',
    'bap:secrets.read', 'bap:secrets.write'));
