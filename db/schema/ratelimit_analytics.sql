-- ratelimit_analytics holds how many decisions of a namespace passed and
-- were denied (and how many shadow decisions passed where their limit would
-- have refused: shadow_denied, apart from both), per bucket of a granularity: 1 a minute (written by the API
-- processes, each adding what it decided since its last flush), 2 an hour
-- and 3 a day (rolled up from the finer ones by the worker's cleanup, which
-- replaces a bucket's counts each time it recomputes them). bucket is the
-- bucket's start in unix ms. Minutes are kept 25 hours, hours 32 days, days
-- 400 days (the cleanup purges older rows).
CREATE TABLE IF NOT EXISTS `ratelimit_analytics` (
    `pk` bigint unsigned AUTO_INCREMENT NOT NULL,
    `workspace_id` varchar(191) NOT NULL,
    `namespace` varchar(255) NOT NULL,
    `granularity` tinyint unsigned NOT NULL,
    `bucket` bigint NOT NULL,
    `passed` bigint unsigned NOT NULL,
    `denied` bigint unsigned NOT NULL,
    `shadow_denied` bigint unsigned NOT NULL DEFAULT 0,
    CONSTRAINT `ratelimit_analytics_pk` PRIMARY KEY (`pk`),
    CONSTRAINT `unique_analytics_bucket` UNIQUE (`workspace_id`, `namespace`, `granularity`, `bucket`),
    INDEX `analytics_granularity_bucket_idx` (`granularity`, `bucket`)
) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- ratelimit_analytics_top holds, per bucket, the identifiers of a namespace
-- that a process's heavy-hitter sketches named (the most denied, the most
-- shadow-denied and the busiest), with the passed, denied and shadow-denied
-- decisions counted for them: minutes added to by the processes, hours and
-- days rolled up by the cleanup, which keeps the 100 most denied (then most
-- shadow-denied, then busiest) identifiers of each.
CREATE TABLE IF NOT EXISTS `ratelimit_analytics_top` (
    `pk` bigint unsigned AUTO_INCREMENT NOT NULL,
    `workspace_id` varchar(191) NOT NULL,
    `namespace` varchar(255) NOT NULL,
    `granularity` tinyint unsigned NOT NULL,
    `bucket` bigint NOT NULL,
    `identifier` varchar(255) NOT NULL,
    `passed` bigint unsigned NOT NULL,
    `denied` bigint unsigned NOT NULL,
    `shadow_denied` bigint unsigned NOT NULL DEFAULT 0,
    CONSTRAINT `ratelimit_analytics_top_pk` PRIMARY KEY (`pk`),
    CONSTRAINT `unique_analytics_top` UNIQUE (`workspace_id`, `namespace`, `granularity`, `bucket`, `identifier`),
    INDEX `analytics_top_granularity_bucket_idx` (`granularity`, `bucket`)
) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- ratelimit_processes is the fleet's roll call: each API process upserts its
-- row every analytics flush with when it last synced with the other regions,
-- the state of its Redis nodes' breakers and its flush interval (how often it
-- reports, so that a reader tells a process gone from one between reports;
-- 0 in rows of an earlier version), for the dashboard. Rows of processes not
-- seen for a day are purged by the cleanup.
CREATE TABLE IF NOT EXISTS `ratelimit_processes` (
    `process_id` varchar(64) NOT NULL,
    `region` varchar(48) NOT NULL,
    `seen_at` bigint unsigned NOT NULL,
    `last_sync_at` bigint unsigned NOT NULL,
    `redis_nodes` text NOT NULL,
    `flush_interval_ms` bigint unsigned NOT NULL DEFAULT 0,
    CONSTRAINT `ratelimit_processes_pk` PRIMARY KEY (`process_id`),
    INDEX `processes_seen_at_idx` (`seen_at`)
) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- ratelimit_analytics_batches names the analytics batches added, each in
-- the transaction that added its rows: a batch sent again (its answer was
-- lost, though its commit may not have been) finds its id and adds nothing.
-- created_at is unix ms; each add deletes some of those over an hour old.
CREATE TABLE IF NOT EXISTS `ratelimit_analytics_batches` (
    `id` varchar(64) NOT NULL,
    `created_at` bigint unsigned NOT NULL,
    CONSTRAINT `ratelimit_analytics_batches_pk` PRIMARY KEY (`id`),
    INDEX `analytics_batches_created_at_idx` (`created_at`)
) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
