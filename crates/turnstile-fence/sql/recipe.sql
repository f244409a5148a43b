-- Fencing Turnstile lock holders in PostgreSQL. Each protected row keeps the cluster it is
-- fenced to and the highest token that has read or written it; every statement compares and
-- records the token in the same UPDATE, under the row's lock.
-- Parameters, the same in every statement:
--   $1 = row id, $2 = cluster_id of the grant, $3 = the grant's token, $4 = a value.
-- Each statement: 1 row means accepted; 0 rows means refused (a newer grant has read or
-- written the row, the token is from another cluster, or the row does not exist).

-- name: schema
CREATE TABLE accounts (
    id          text   PRIMARY KEY,
    balance     bigint NOT NULL DEFAULT 0,
    cluster_id  text   NOT NULL,
    fence_token bigint NOT NULL DEFAULT 0 CHECK (fence_token >= 0)
);

-- name: create
-- Creates the row, fenced to cluster $2, if it does not exist yet.
INSERT INTO accounts (id, cluster_id) VALUES ($1, $2)
ON CONFLICT (id) DO NOTHING;

-- name: fenced_write
-- A write that does not depend on what is there: sets the value, records the token.
UPDATE accounts SET balance = $4, fence_token = $3
 WHERE id = $1 AND cluster_id = $2 AND fence_token <= $3;

-- name: fenced_add
-- Read-modify-write in one statement: the new value is computed from the current row.
UPDATE accounts SET balance = balance + $4, fence_token = $3
 WHERE id = $1 AND cluster_id = $2 AND fence_token <= $3
RETURNING balance;

-- name: fenced_read
-- A read that records the token, for read-modify-write computed by the application: read
-- with this, compute, then write with fenced_write and the same token. Once a newer grant
-- has read the row, the older grant's fenced_write matches 0 rows.
UPDATE accounts SET fence_token = $3
 WHERE id = $1 AND cluster_id = $2 AND fence_token <= $3
RETURNING balance;

-- name: diagnose
-- After 0 rows, for the error message only (never decide to write from it).
SELECT cluster_id, fence_token FROM accounts WHERE id = $1;
