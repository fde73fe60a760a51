package postgres

import "context"

// SyncCommit returns synchronous_commit as the store's connections see it.
func SyncCommit(ctx context.Context, s *Store) (string, error) {
	var v string
	err := s.pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&v)
	return v, err
}
