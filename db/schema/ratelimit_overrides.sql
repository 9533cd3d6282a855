-- ratelimit_overrides holds the overrides of a workspace's limits: for an
-- identifier of a namespace (exact, or a pattern with * wildcards), the limit
-- and duration that replace what the caller sends. Every API process keeps
-- them all in memory and polls this table for changes (updated_at_idx), so a
-- deletion is a tombstone (deleted_at > 0) that the poll can see; a deleted
-- override set again is revived with a new id.
CREATE TABLE IF NOT EXISTS `ratelimit_overrides` (
    `pk` bigint unsigned AUTO_INCREMENT NOT NULL,
    `id` varchar(64) NOT NULL,
    `workspace_id` varchar(191) NOT NULL,
    `namespace` varchar(255) NOT NULL,
    `identifier` varchar(255) NOT NULL,
    `limit_value` bigint unsigned NOT NULL,
    `duration_ms` bigint unsigned NOT NULL,
    `updated_at` bigint unsigned NOT NULL,
    `deleted_at` bigint unsigned NOT NULL DEFAULT 0,
    CONSTRAINT `ratelimit_overrides_pk` PRIMARY KEY (`pk`),
    CONSTRAINT `unique_override` UNIQUE (`workspace_id`, `namespace`, `identifier`),
    CONSTRAINT `unique_override_id` UNIQUE (`id`),
    INDEX `overrides_updated_at_idx` (`updated_at`)
) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
