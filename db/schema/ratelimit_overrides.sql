-- ratelimit_overrides holds the overrides of a workspace's limits: for an
-- identifier of a namespace (exact, or a pattern with * wildcards), the limit
-- and duration that replace what the caller sends. Every API process keeps
-- them all in memory and polls this table for changes (overrides_revision_idx),
-- so a deletion is a tombstone (deleted_at > 0) that the poll can see, until
-- the worker's cleanup purges it a day later (overrides_deleted_at_idx); a
-- deleted override set again is revived with a new id. burst replaces a
-- token bucket's burst (0: the request's own). shadow decides the requests
-- it matches as shadow calls (admitted, marked where the limit would have
-- refused); a shadow override of duration_ms 0 keeps the requests' own
-- limits, and one of identifier '*' switches its whole namespace.
--
-- Every time, updated_at and deleted_at (unix ms) and revision (unix µs) are
-- the database's clock, never a writer's: processes whose clocks disagree
-- still see changes in the order the database made them. A row's revision
-- grows with every change of it (at least by one, whatever the clock does),
-- so the later of two states of an override is always the one with the
-- larger revision.
CREATE TABLE IF NOT EXISTS `ratelimit_overrides` (
    `pk` bigint unsigned AUTO_INCREMENT NOT NULL,
    `id` varchar(64) NOT NULL,
    `workspace_id` varchar(191) NOT NULL,
    `namespace` varchar(255) NOT NULL,
    `identifier` varchar(255) NOT NULL,
    `limit_value` bigint unsigned NOT NULL,
    `duration_ms` bigint unsigned NOT NULL,
    `burst` bigint unsigned NOT NULL DEFAULT 0,
    `shadow` boolean NOT NULL DEFAULT FALSE,
    `updated_at` bigint unsigned NOT NULL,
    `deleted_at` bigint unsigned NOT NULL DEFAULT 0,
    `revision` bigint unsigned NOT NULL DEFAULT 0,
    CONSTRAINT `ratelimit_overrides_pk` PRIMARY KEY (`pk`),
    CONSTRAINT `unique_override` UNIQUE (`workspace_id`, `namespace`, `identifier`),
    CONSTRAINT `unique_override_id` UNIQUE (`id`),
    INDEX `overrides_updated_at_idx` (`updated_at`),
    INDEX `overrides_revision_idx` (`revision`),
    INDEX `overrides_deleted_at_idx` (`deleted_at`)
) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
