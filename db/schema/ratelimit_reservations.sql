-- ratelimit_reservation_settlements records each settled reservation, so
-- that a reservation is settled once whatever process or region is asked:
-- the first settle inserts its row, any later one finds it (by the unique
-- id, the reservation's random 128 bits); pk orders the cleanup's batches; cost the cost it was settled at;
-- expires_at (unix ms) when the reservation could no longer be settled,
-- after which the worker's cleanup deletes the row; workspace_id whose
-- reservation it was ('' in rows of an earlier version), so that a
-- workspace's live rows can be counted against its cap.
CREATE TABLE IF NOT EXISTS `ratelimit_reservation_settlements` (
    `pk` bigint unsigned AUTO_INCREMENT NOT NULL,
    `id` binary(16) NOT NULL,
    `cost` bigint unsigned NOT NULL,
    `expires_at` bigint unsigned NOT NULL,
    `workspace_id` varchar(191) NOT NULL DEFAULT '',
    CONSTRAINT `ratelimit_reservation_settlements_pk` PRIMARY KEY (`pk`),
    CONSTRAINT `unique_settlement_id` UNIQUE (`id`),
    INDEX `settlements_expires_at_idx` (`expires_at`),
    INDEX `settlements_workspace_idx` (`workspace_id`, `expires_at`)
) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- ratelimit_secrets holds secrets every region shares, by name: the key that
-- signs reservations ("reservations"), so that one issued in one region
-- verifies in every other. The first process to need one inserts it; the
-- others read it.
CREATE TABLE IF NOT EXISTS `ratelimit_secrets` (
    `name` varchar(64) NOT NULL,
    `secret` varbinary(64) NOT NULL,
    CONSTRAINT `ratelimit_secrets_pk` PRIMARY KEY (`name`)
);
