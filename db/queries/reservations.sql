-- name: SettlementClaim :execrows
-- SettlementClaim records that reservation id of workspace_id was settled
-- at cost: one row affected for the first settle, none when the
-- reservation was settled before (then SettlementCost says at what cost).
INSERT IGNORE INTO ratelimit_reservation_settlements (id, cost, expires_at, workspace_id) VALUES (?, ?, ?, ?);

-- name: SettlementsLive :one
-- SettlementsLive counts a workspace's settlements not yet expired at now
-- (unix ms).
SELECT CAST(COUNT(*) AS SIGNED) FROM ratelimit_reservation_settlements
WHERE workspace_id = ? AND expires_at > sqlc.arg(now);

-- name: SettlementCost :one
-- SettlementCost returns the cost a reservation was first settled at.
SELECT cost FROM ratelimit_reservation_settlements WHERE id = ?;

-- name: SettlementsPurgeBatch :one
-- SettlementsPurgeBatch counts the first limit settlements, by primary
-- key, that expired before cutoff (unix ms), and returns the last one's
-- key: the batch SettlementsPurge removes, counted once however often it
-- runs.
SELECT CAST(COUNT(*) AS SIGNED) AS rows_in_batch, CAST(COALESCE(MAX(pk), 0) AS UNSIGNED) AS last_pk
FROM (
    SELECT pk FROM ratelimit_reservation_settlements
    WHERE expires_at < sqlc.arg(cutoff)
    ORDER BY pk
    LIMIT ?
) batch;

-- name: SettlementsPurge :execrows
-- SettlementsPurge deletes the batch SettlementsPurgeBatch counted.
DELETE FROM ratelimit_reservation_settlements
WHERE pk <= sqlc.arg(last_pk) AND expires_at < sqlc.arg(cutoff);

-- name: SecretInsert :exec
-- SecretInsert stores secret under name unless one is stored already.
INSERT IGNORE INTO ratelimit_secrets (name, secret) VALUES (?, ?);

-- name: SecretGet :one
-- SecretGet returns the secret stored under name.
SELECT secret FROM ratelimit_secrets WHERE name = ?;
