-- ratelimit_keys holds the API keys of every workspace: who may call the
-- API and what each may do. A key's secret is never stored, only its
-- SHA-256 digest, which is what a request's bearer token is compared with.
-- Every API process keeps every key in memory and reads the rows that
-- changed when the table's summary (count and revisions) does, so a
-- revoked key is a row with revoked_at > 0, never a deleted one: the poll
-- must see it go.
--
-- Every time (unix ms) and revision (unix µs) is the database's clock. A
-- row's revision grows with every change of it, by at least one whatever
-- the clock does.
CREATE TABLE IF NOT EXISTS `ratelimit_keys` (
    `pk` bigint unsigned AUTO_INCREMENT NOT NULL,
    `id` varchar(64) NOT NULL,
    `workspace_id` varchar(191) NOT NULL,
    `name` varchar(255) NOT NULL,
    `digest` binary(32) NOT NULL,
    -- permissions are the key's permission names, space-separated.
    `permissions` text NOT NULL,
    `expires_at` bigint unsigned NOT NULL DEFAULT 0,
    `revoked_at` bigint unsigned NOT NULL DEFAULT 0,
    `created_at` bigint unsigned NOT NULL,
    `updated_at` bigint unsigned NOT NULL,
    `revision` bigint unsigned NOT NULL,
    CONSTRAINT `ratelimit_keys_pk` PRIMARY KEY (`pk`),
    CONSTRAINT `unique_key_id` UNIQUE (`id`),
    CONSTRAINT `unique_key_digest` UNIQUE (`digest`),
    INDEX `keys_workspace_idx` (`workspace_id`, `id`),
    INDEX `keys_revision_idx` (`revision`)
) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
