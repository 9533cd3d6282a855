-- ratelimit_penalties holds the penalty boxes: for an identifier of a
-- workspace's namespace, the latest block a denial started (started_at to
-- until_at, unix ms by the clock of the process that decided it) and when
-- it was last lifted (cleared_at: a block that began before it is void).
-- Every API process keeps the blocks in force in memory and polls this
-- table for changes (penalties_updated_at_idx, the database's clock), so
-- that a block started in one process, or one region, holds in all.
--
-- A write merges, never replaces: of the row and the state written, the
-- one whose latest event (its block's start, or its lift) is later wins
-- whole (a total order, see store.Merge), in a transaction that locks the
-- row, so a write replayed, duplicated or read late changes nothing a
-- newer one set, whatever the order they arrive in. A lift writes its
-- time and no block. expires_at is when the row stops mattering: the block's end
-- plus its length (a repeat offence within it doubles the next block);
-- the worker's cleanup deletes rows past it (penalties_expires_at_idx).
CREATE TABLE IF NOT EXISTS `ratelimit_penalties` (
    `pk` bigint unsigned AUTO_INCREMENT NOT NULL,
    `workspace_id` varchar(191) NOT NULL,
    `namespace` varchar(255) NOT NULL,
    `identifier` varchar(255) NOT NULL,
    `started_at` bigint unsigned NOT NULL,
    `until_at` bigint unsigned NOT NULL,
    `cleared_at` bigint unsigned NOT NULL DEFAULT 0,
    `expires_at` bigint unsigned NOT NULL,
    `updated_at` bigint unsigned NOT NULL,
    CONSTRAINT `ratelimit_penalties_pk` PRIMARY KEY (`pk`),
    CONSTRAINT `unique_penalty` UNIQUE (`workspace_id`, `namespace`, `identifier`),
    INDEX `penalties_updated_at_idx` (`updated_at`),
    INDEX `penalties_expires_at_idx` (`expires_at`)
) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
