-- name: AuditInsert :exec
-- AuditInsert records one change, at the database's time.
INSERT INTO ratelimit_audit_log (
    workspace_id, actor_key_id, action, target, before_value, after_value, request_id, created_at
) VALUES (
    ?, ?, ?, ?, ?, ?, ?, FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000)
);

-- name: AuditList :many
-- AuditList returns up to limit entries of a workspace, newest first,
-- older than the entry before_pk (a page's cursor is its last pk), that
-- match every filter given ('' or 0: any): an action, a target, an acting
-- key, and a time range [since, until) in unix ms.
SELECT pk, workspace_id, actor_key_id, action, target, before_value, after_value, request_id, created_at
FROM ratelimit_audit_log
WHERE workspace_id = sqlc.arg(workspace_id)
    AND pk < sqlc.arg(before_pk)
    AND (sqlc.arg(action) = '' OR action = sqlc.arg(action))
    AND (sqlc.arg(target) = '' OR target = sqlc.arg(target))
    AND (sqlc.arg(actor_key_id) = '' OR actor_key_id = sqlc.arg(actor_key_id))
    AND created_at >= sqlc.arg(since_ms)
    AND created_at < sqlc.arg(until_ms)
ORDER BY pk DESC
LIMIT ?;

-- name: AuditPurgeBatch :one
-- AuditPurgeBatch counts the first limit entries, by primary key, recorded
-- before cutoff (unix ms by the database's clock: its now less the
-- retention), and returns the last one's key: the batch AuditPurge
-- removes, counted once however often it runs.
SELECT CAST(COUNT(*) AS SIGNED) AS rows_in_batch, CAST(COALESCE(MAX(pk), 0) AS UNSIGNED) AS last_pk
FROM (
    SELECT pk FROM ratelimit_audit_log
    WHERE created_at < sqlc.arg(cutoff)
    ORDER BY pk
    LIMIT ?
) batch;

-- name: AuditPurge :execrows
-- AuditPurge removes the batch AuditPurgeBatch counted.
DELETE FROM ratelimit_audit_log
WHERE pk <= sqlc.arg(last_pk) AND created_at < sqlc.arg(cutoff);
