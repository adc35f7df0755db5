// Command kopia-minio does through the gateway what Kopia's S3 storage does with minio-go
// v7: PutObject with Content-MD5 (whole blobs and one large enough for multipart),
// StatObject, ListObjects by prefix in pages, ranged GetObject, RemoveObject; and, with
// -locked-endpoint, on a versioned bucket with Object Lock: PutObject with a retention
// mode and date, the lock read back by StatObject, PutObjectRetention extending it (Kopia's
// `maintenance --extend-object-locks`), ListObjects with versions, GetObject of an old
// version (Kopia's point-in-time restore), and RemoveObject of a version that the upstream
// keeps locked. Built offline in GOPATH mode against Debian's packages (conformance/run).
//
// Each step is one row of the harness's table (package kuraconf/steps).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"kuraconf/steps"
)

var (
	endpoint       = flag.String("endpoint", "", "the gateway, host:port")
	bucket         = flag.String("bucket", "", "bucket (created by the harness)")
	lockedEndpoint = flag.String("locked-endpoint", "", "a gateway in front of a versioned upstream, host:port")
	lockedBucket   = flag.String("locked-bucket", "", "a versioned bucket with Object Lock there")
)

const contentType = "application/x-kopia"

func client(host string) (*minio.Client, error) {
	return minio.New(host, &minio.Options{
		Creds:  credentials.NewStaticV4(os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), ""),
		Secure: false,
		Region: "us-east-1",
	})
}

func blob(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// Kopia's blob IDs: pack blobs start with p, index blobs with x, plus the format blob.
var blobs = map[string][]byte{
	"kopia.repository":                     blob(1123, 1),
	"p0a1b2c3d4e5f60718293a4b5c6d7e8f9":    blob(4<<20+17, 2),
	"p1f2e3d4c5b6a79808f7e6d5c4b3a2910":    blob(20<<20+5, 3), // above minio-go's 16 MiB part: multipart
	"p2aa55aa55aa55aa55aa55aa55aa55aa5":    blob(0, 4),
	"xn0_5e0c3d2b1a0f9e8d7c6b5a4f3e2d1c0b": blob(70000, 5),
}

func keysWith(prefix string) []string {
	var ks []string
	for k := range blobs {
		if strings.HasPrefix(k, prefix) {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	return ks
}

func readAll(ctx context.Context, c *minio.Client, bkt, k string, opts minio.GetObjectOptions) ([]byte, error) {
	obj, err := c.GetObject(ctx, bkt, k, opts)
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	return io.ReadAll(obj)
}

func stepPut(ctx context.Context, c *minio.Client) error {
	for _, k := range keysWith("") {
		data := blobs[k]
		info, err := c.PutObject(ctx, *bucket, k, bytes.NewReader(data), int64(len(data)),
			minio.PutObjectOptions{ContentType: contentType, SendContentMd5: true})
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		st, err := c.StatObject(ctx, *bucket, k, minio.StatObjectOptions{})
		if err != nil {
			return fmt.Errorf("stat %s: %w", k, err)
		}
		if st.Size != int64(len(data)) || st.ETag != info.ETag || st.ContentType != contentType {
			return fmt.Errorf("stat %s: size %d etag %s type %q; put %d bytes, etag %s", k, st.Size, st.ETag, st.ContentType, len(data), info.ETag)
		}
	}
	return nil
}

func stepList(ctx context.Context, c *minio.Client) error {
	for _, prefix := range []string{"p", "x", "kopia.", ""} {
		var got []string
		for o := range c.ListObjects(ctx, *bucket, minio.ListObjectsOptions{Prefix: prefix, MaxKeys: 2}) {
			if o.Err != nil {
				return fmt.Errorf("prefix %q: %w", prefix, o.Err)
			}
			if o.Size != int64(len(blobs[o.Key])) {
				return fmt.Errorf("%s listed with size %d, holds %d", o.Key, o.Size, len(blobs[o.Key]))
			}
			got = append(got, o.Key)
		}
		if want := keysWith(prefix); !reflect.DeepEqual(got, want) {
			return fmt.Errorf("prefix %q lists %q, want %q", prefix, got, want)
		}
	}
	return nil
}

func stepGet(ctx context.Context, c *minio.Client) error {
	for _, k := range keysWith("") {
		data := blobs[k]
		whole, err := readAll(ctx, c, *bucket, k, minio.GetObjectOptions{})
		if err != nil || !bytes.Equal(whole, data) {
			return fmt.Errorf("%s: whole read differs (%v)", k, err)
		}
		n := int64(len(data))
		if n < 2 {
			continue
		}
		for _, r := range [][2]int64{{0, 0}, {1, n - 1}, {n / 3, n/3 + 4095}, {n - 10, n - 1}} {
			if r[1] >= n {
				r[1] = n - 1
			}
			var opts minio.GetObjectOptions
			if err := opts.SetRange(r[0], r[1]); err != nil {
				return err
			}
			got, err := readAll(ctx, c, *bucket, k, opts)
			if err != nil || !bytes.Equal(got, data[r[0]:r[1]+1]) {
				return fmt.Errorf("%s range %v differs (%v)", k, r, err)
			}
		}
	}
	return nil
}

func stepRemove(ctx context.Context, c *minio.Client) error {
	k := "xn0_5e0c3d2b1a0f9e8d7c6b5a4f3e2d1c0b"
	if err := c.RemoveObject(ctx, *bucket, k, minio.RemoveObjectOptions{}); err != nil {
		return err
	}
	_, err := c.StatObject(ctx, *bucket, k, minio.StatObjectOptions{})
	if code := minio.ToErrorResponse(err).Code; code != "NoSuchKey" {
		return fmt.Errorf("stat after remove: %v (code %q), want NoSuchKey", err, code)
	}
	return nil
}

// retention reads a version's lock from StatObject (HEAD), as Kopia's blob metadata does:
// moto's server (5.2) has no GetObjectRetention (it answers 500 with the object's body).
func retention(ctx context.Context, c *minio.Client, k, version string) (string, time.Time, error) {
	st, err := c.StatObject(ctx, *lockedBucket, k, minio.StatObjectOptions{VersionID: version})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("stat %s: %w", version, err)
	}
	date, err := time.Parse(time.RFC3339, st.Metadata.Get("X-Amz-Object-Lock-Retain-Until-Date"))
	if err != nil {
		return "", time.Time{}, fmt.Errorf("version %s: retain-until date: %w", version, err)
	}
	return st.Metadata.Get("X-Amz-Object-Lock-Mode"), date, nil
}

// lockedSteps run against a gateway whose upstream keeps versions and Object Lock.
func lockedSteps(ctx context.Context, c *minio.Client) []steps.Step {
	const k = "p3c0ffee0c0ffee0c0ffee0c0ffee0c0f"
	old, cur := blob(3<<20+1, 10), blob(200000, 11)
	var versions []string // version IDs, oldest first
	until := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
	return []steps.Step{
		{Name: "PutObject with retention (GOVERNANCE), two versions", Run: func() error {
			for _, data := range [][]byte{old, cur} {
				info, err := c.PutObject(ctx, *lockedBucket, k, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{
					ContentType: contentType, SendContentMd5: true,
					Mode: minio.Governance, RetainUntilDate: until,
				})
				if err != nil {
					return err
				}
				if info.VersionID == "" {
					return errors.New("PutObject returned no version ID")
				}
				versions = append(versions, info.VersionID)
			}
			for _, v := range versions {
				mode, date, err := retention(ctx, c, k, v)
				if err != nil {
					return err
				}
				if mode != string(minio.Governance) || !date.Equal(until) {
					return fmt.Errorf("version %s retention %q until %v, want GOVERNANCE until %v", v, mode, date, until)
				}
			}
			return nil
		}},
		{Name: "PutObjectRetention extends the lock", Run: func() error {
			later := until.Add(24 * time.Hour)
			mode := minio.Governance
			for _, v := range versions {
				if err := c.PutObjectRetention(ctx, *lockedBucket, k, minio.PutObjectRetentionOptions{
					Mode: &mode, RetainUntilDate: &later, VersionID: v,
				}); err != nil {
					return fmt.Errorf("version %s: %w", v, err)
				}
				_, date, err := retention(ctx, c, k, v)
				if err != nil || !date.Equal(later) {
					return fmt.Errorf("version %s retained until %v (%v), want %v", v, date, err, later)
				}
			}
			return nil
		}},
		{Name: "ListObjects with versions; GetObject of an old version", Run: func() error {
			if err := c.RemoveObject(ctx, *lockedBucket, k, minio.RemoveObjectOptions{}); err != nil {
				return fmt.Errorf("remove (delete marker): %w", err)
			}
			var sizes []string
			for o := range c.ListObjects(ctx, *lockedBucket, minio.ListObjectsOptions{Prefix: "p3", WithVersions: true}) {
				if o.Err != nil {
					return o.Err
				}
				sizes = append(sizes, fmt.Sprintf("%d/%t/%t", o.Size, o.IsLatest, o.IsDeleteMarker))
			}
			want := []string{"0/true/true", fmt.Sprintf("%d/false/false", len(cur)), fmt.Sprintf("%d/false/false", len(old))}
			if !reflect.DeepEqual(sizes, want) {
				return fmt.Errorf("versions listed as size/latest/marker %q, want %q", sizes, want)
			}
			got, err := readAll(ctx, c, *lockedBucket, k, minio.GetObjectOptions{VersionID: versions[0]})
			if err != nil || !bytes.Equal(got, old) {
				return fmt.Errorf("old version differs (%v)", err)
			}
			var opts minio.GetObjectOptions
			opts.VersionID = versions[0]
			_ = opts.SetRange(1<<20, 2<<20)
			got, err = readAll(ctx, c, *lockedBucket, k, opts)
			if err != nil || !bytes.Equal(got, old[1<<20:2<<20+1]) {
				return fmt.Errorf("range of the old version differs (%v)", err)
			}
			return nil
		}},
		{Name: "RemoveObject of a locked version is refused", Run: func() error {
			err := c.RemoveObject(ctx, *lockedBucket, k, minio.RemoveObjectOptions{VersionID: versions[0]})
			if err == nil {
				return errors.New("a version under GOVERNANCE retention was deleted")
			}
			if code := minio.ToErrorResponse(err).Code; code != "AccessDenied" {
				return fmt.Errorf("remove of a locked version: %v (code %q), want AccessDenied", err, code)
			}
			got, err := readAll(ctx, c, *lockedBucket, k, minio.GetObjectOptions{VersionID: versions[0]})
			if err != nil || !bytes.Equal(got, old) {
				return fmt.Errorf("locked version unreadable after the refused remove (%v)", err)
			}
			return nil
		}},
	}
}

func main() {
	flag.Parse()
	c, err := client(*endpoint)
	if err != nil {
		steps.Fatal(err)
	}
	ctx := context.Background()
	all := []steps.Step{
		{Name: "PutObject with Content-MD5, StatObject", Run: func() error { return stepPut(ctx, c) }},
		{Name: "ListObjects by prefix, pages of 2", Run: func() error { return stepList(ctx, c) }},
		{Name: "GetObject whole and ranges", Run: func() error { return stepGet(ctx, c) }},
		{Name: "RemoveObject", Run: func() error { return stepRemove(ctx, c) }},
	}
	if *lockedEndpoint != "" {
		lc, err := client(*lockedEndpoint)
		if err != nil {
			steps.Fatal(err)
		}
		all = append(all, lockedSteps(ctx, lc)...)
	}
	steps.RunAll(all)
}
