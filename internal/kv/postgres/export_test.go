package postgres

import "context"

// SyncCommit returns synchronous_commit as the store's connections see it.
func SyncCommit(ctx context.Context, s *Store) (string, error) {
	var v string
	err := s.pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&v)
	return v, err
}

// Setting returns a run-time setting as the store's connections see it.
func Setting(ctx context.Context, s *Store, name string) (string, error) {
	var v string
	err := s.pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v)
	return v, err
}

// ExplainUpdate returns the plan a connection of the store keeps for its
// statement that updates keys in place, run with one key.
func ExplainUpdate(ctx context.Context, s *Store) (string, error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return "", err
	}
	defer c.Release()
	if _, err := c.Exec(ctx, "PREPARE explained AS "+s.sql.update); err != nil {
		return "", err
	}
	defer c.Exec(ctx, "DEALLOCATE explained")
	rows, err := c.Query(ctx, `EXPLAIN EXECUTE explained('{"\\x41"}', '{"\\x41"}')`)
	if err != nil {
		return "", err
	}
	var plan string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return "", err
		}
		plan += line + "\n"
	}
	return plan, rows.Err()
}

// Reads returns how many reading statements the store's transactions sent.
func Reads(s *Store) int64 { return s.reads.Load() }
