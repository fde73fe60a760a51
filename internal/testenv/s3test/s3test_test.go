package s3test_test

import (
	"context"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/cairnfs/cairn/internal/testenv/s3test"
)

func TestMain(m *testing.M) { s3test.Main(m) }

func client(t *testing.T, b s3test.Bucket) *minio.Client {
	t.Helper()
	c, err := minio.New(strings.TrimPrefix(b.Endpoint, "http://"), &minio.Options{
		Creds:      credentials.NewStaticV4(b.AccessKey, b.SecretKey, ""),
		Region:     "us-east-1",
		MaxRetries: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestBucket(t *testing.T) {
	b := s3test.NewBucket(t)
	c := client(t, b)
	ctx := context.Background()
	if ok, err := c.BucketExists(ctx, b.Name); err != nil || !ok {
		t.Fatalf("BucketExists(%s) = %v, %v", b.Name, ok, err)
	}
	if _, err := c.PutObject(ctx, b.Name, "k", strings.NewReader("v"), 1, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if want := "s3://" + b.Name + "?endpoint=" + b.Endpoint; b.URL != want {
		t.Errorf("URL = %q, want %q", b.URL, want)
	}
	b2 := s3test.NewBucket(t)
	if b2.Name == b.Name {
		t.Errorf("two buckets named %s", b.Name)
	}
}

func TestStopStart(t *testing.T) {
	srv := s3test.Shared(t)
	b := srv.NewBucket(t)
	c := client(t, b)
	ctx := context.Background()
	if _, err := c.PutObject(ctx, b.Name, "k", strings.NewReader("v"), 1, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := c.StatObject(ctx, b.Name, "k", minio.StatObjectOptions{}); err == nil {
		t.Fatal("StatObject succeeded with the server stopped")
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatalf("second Start: %v", err)
	}
	if info, err := c.StatObject(ctx, b.Name, "k", minio.StatObjectOptions{}); err != nil || info.Size != 1 {
		t.Fatalf("after restart StatObject = %+v, %v", info, err)
	}
}
