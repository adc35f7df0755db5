// Command velero-awsv2 does through the gateway what Velero's AWS object-store plugin does
// with aws-sdk-go-v2: the manager's uploader with 5 MiB parts and 5 in flight (CRC32
// checksums, the plugin's default), HeadObject, whole and ranged GetObject, ListObjectsV2
// with a delimiter, a GET presigned for the public URL and fetched by net/http, and
// DeleteObject. Built offline in GOPATH mode against Debian's packages (conformance/run).
//
// Each step is one row of the harness's table (package kuraconf/steps).
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"kuraconf/steps"
)

var (
	endpoint  = flag.String("endpoint", "", "the gateway's URL as the scenario reaches it")
	publicURL = flag.String("public-url", "", "the gateway's URL as presigned URLs name it")
	bucket    = flag.String("bucket", "", "bucket (created by the harness)")
	region    = flag.String("region", "us-east-1", "region to sign for (the BSL's)")
	pathStyle = flag.Bool("path-style", true, "path-style addressing (the BSL's s3ForcePathStyle)")
	prefix    = flag.String("prefix", "", "key prefix (the BSL's objectStorage.prefix)")
	tarball   = flag.String("tarball", "", "the backup tarball to upload")
)

func key(k string) string {
	if *prefix == "" {
		return k
	}
	return *prefix + "/" + k
}

func client(url string) (*s3.Client, error) {
	cfg, err := config.LoadDefaultConfig(context.Background(), config.WithRegion(*region))
	if err != nil {
		return nil, err
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.UsePathStyle = *pathStyle
		o.EndpointResolver = s3.EndpointResolverFromURL(url)
		o.RetryMaxAttempts = 1 // loopback: a retry would only hide a gateway fault
	}), nil
}

func sum(b []byte) [32]byte { return sha256.Sum256(b) }

func get(ctx context.Context, c *s3.Client, k string, rng *string) ([]byte, error) {
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: bucket, Key: aws.String(k), Range: rng})
	if err != nil {
		return nil, err
	}
	defer out.Body.Close()
	return io.ReadAll(out.Body)
}

const tarballKey = "backups/nightly-1/nightly-1.tar.gz"

func stepUpload(ctx context.Context, c *s3.Client, data []byte) error {
	up := manager.NewUploader(c, func(u *manager.Uploader) {
		u.PartSize = 5 << 20
		u.Concurrency = 5
	})
	out, err := up.Upload(ctx, &s3.PutObjectInput{
		Bucket:            bucket,
		Key:               aws.String(key(tarballKey)),
		Body:              bytes.NewReader(data),
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32,
	})
	if err != nil {
		return err
	}
	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: bucket, Key: aws.String(key(tarballKey))})
	if err != nil {
		return err
	}
	if head.ContentLength != int64(len(data)) {
		return fmt.Errorf("HEAD size %d, uploaded %d", head.ContentLength, len(data))
	}
	if aws.ToString(head.ETag) != aws.ToString(out.ETag) {
		return fmt.Errorf("HEAD ETag %s, completion's %s", aws.ToString(head.ETag), aws.ToString(out.ETag))
	}
	if want := (len(data) + (5 << 20) - 1) / (5 << 20); !strings.HasSuffix(aws.ToString(out.ETag), fmt.Sprintf("-%d\"", want)) {
		return fmt.Errorf("ETag %s does not say %d parts", aws.ToString(out.ETag), want)
	}
	return nil
}

func stepGet(ctx context.Context, c *s3.Client, data []byte) error {
	whole, err := get(ctx, c, key(tarballKey), nil)
	if err != nil {
		return err
	}
	if sum(whole) != sum(data) {
		return errors.New("whole GET differs")
	}
	n := len(data)
	for _, r := range [][2]int{{0, 0}, {0, 5<<20 - 1}, {5<<20 - 3, 5<<20 + 3}, {n - 1000, n - 1}, {12345, 9 << 20}} {
		got, err := get(ctx, c, key(tarballKey), aws.String(fmt.Sprintf("bytes=%d-%d", r[0], r[1])))
		if err != nil {
			return fmt.Errorf("range %v: %w", r, err)
		}
		if !bytes.Equal(got, data[r[0]:r[1]+1]) {
			return fmt.Errorf("range %v differs", r)
		}
	}
	got, err := get(ctx, c, key(tarballKey), aws.String("bytes=-777"))
	if err != nil || !bytes.Equal(got, data[n-777:]) {
		return fmt.Errorf("suffix range: %v", err)
	}
	return nil
}

func stepList(ctx context.Context, c *s3.Client) error {
	small := []string{
		"backups/nightly-1/nightly-1-logs.gz",
		"backups/nightly-2/nightly-2.tar.gz",
		"backups/nightly-2/velero-backup.json",
		"restores/r-1/restore-r-1-logs.gz",
		"metadata/revision",
	}
	for i, k := range small {
		body := make([]byte, 100+i*1000)
		rand.New(rand.NewSource(int64(i))).Read(body)
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: bucket, Key: aws.String(key(k)), Body: bytes.NewReader(body)}); err != nil {
			return err
		}
	}
	prefixes := func(p string) ([]string, error) {
		out, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: bucket, Prefix: aws.String(p), Delimiter: aws.String("/")})
		if err != nil {
			return nil, err
		}
		var got []string
		for _, cp := range out.CommonPrefixes {
			got = append(got, aws.ToString(cp.Prefix))
		}
		return got, nil
	}
	top := key("")
	got, err := prefixes(top)
	if err != nil {
		return err
	}
	if want := []string{key("backups/"), key("metadata/"), key("restores/")}; !reflect.DeepEqual(got, want) {
		return fmt.Errorf("top level %q, want %q", got, want)
	}
	got, err = prefixes(key("backups/"))
	if err != nil {
		return err
	}
	if want := []string{key("backups/nightly-1/"), key("backups/nightly-2/")}; !reflect.DeepEqual(got, want) {
		return fmt.Errorf("backups/ %q, want %q", got, want)
	}
	flat, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: bucket, Prefix: aws.String(key("backups/nightly-2/"))})
	if err != nil {
		return err
	}
	var listed []string
	for _, o := range flat.Contents {
		listed = append(listed, fmt.Sprintf("%s=%d", aws.ToString(o.Key), o.Size))
	}
	want := []string{key(small[1]) + "=1100", key(small[2]) + "=2100"}
	if !reflect.DeepEqual(listed, want) {
		return fmt.Errorf("backups/nightly-2/ lists %q, want %q", listed, want)
	}
	return nil
}

// stepPresign is `velero backup download`: a URL presigned for the public URL, fetched by a
// plain HTTP client that connects to the scenario's address.
func stepPresign(ctx context.Context, data []byte) error {
	public, err := client(*publicURL)
	if err != nil {
		return err
	}
	req, err := s3.NewPresignClient(public).PresignGetObject(ctx,
		&s3.GetObjectInput{Bucket: bucket, Key: aws.String(key(tarballKey))},
		s3.WithPresignExpires(10*time.Minute))
	if err != nil {
		return err
	}
	connect := strings.TrimPrefix(*endpoint, "http://")
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, connect)
	}}}
	fetch := func(url string) (int, []byte, error) {
		resp, err := hc.Get(url)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, body, err
	}
	status, body, err := fetch(req.URL)
	if err != nil {
		return err
	}
	if status != 200 || sum(body) != sum(data) {
		return fmt.Errorf("presigned GET answered %d with %d bytes", status, len(body))
	}
	status, _, err = fetch(strings.Replace(req.URL, "nightly-1.tar.gz", "nightly-1-logs.gz", 1))
	if err != nil {
		return err
	}
	if status != 403 {
		return fmt.Errorf("a presigned URL pointed at another key answered %d, not 403", status)
	}
	return nil
}

func stepDelete(ctx context.Context, c *s3.Client) error {
	k := key("backups/nightly-1/nightly-1-logs.gz")
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: bucket, Key: aws.String(k)}); err != nil {
		return err
	}
	_, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: bucket, Key: aws.String(k)})
	// This SDK (service/s3 1.29) reports a HEAD's 404 as a generic API error, not types.NotFound.
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "NotFound" {
		return fmt.Errorf("HEAD after delete: %v, want NotFound", err)
	}
	return nil
}

func main() {
	flag.Parse()
	data, err := os.ReadFile(*tarball)
	if err != nil {
		steps.Fatal(err)
	}
	c, err := client(*endpoint)
	if err != nil {
		steps.Fatal(err)
	}
	ctx := context.Background()
	all := []steps.Step{
		{Name: "manager upload, 5 MiB parts x5, CRC32", Run: func() error { return stepUpload(ctx, c, data) }},
		{Name: "get + ranges", Run: func() error { return stepGet(ctx, c, data) }},
		{Name: "list v2 delimiter", Run: func() error { return stepList(ctx, c) }},
		{Name: "presigned GET (public URL)", Run: func() error { return stepPresign(ctx, data) }},
		{Name: "delete", Run: func() error { return stepDelete(ctx, c) }},
	}
	steps.RunAll(all)
}
