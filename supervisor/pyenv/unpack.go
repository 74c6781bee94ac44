package pyenv

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// unpackOnce returns the directory archive is unpacked in, unpacking it
// unless an earlier call (of this or another server) did.
func (c *Cache) unpackOnce(archive string, info fs.FileInfo) (dir string, unpacked bool, err error) {
	sum, err := c.contentHash(archive, info)
	if err != nil {
		return "", false, err
	}
	dest := filepath.Join(c.dir, sum[:32])
	m := c.lock(sum)
	m.Lock()
	defer m.Unlock()
	if _, err := os.Stat(dest); err == nil {
		return dest, false, nil
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return "", false, err
	}
	tmp, err := os.MkdirTemp(c.dir, ".unpack-")
	if err != nil {
		return "", false, err
	}
	if err := untar(archive, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return "", false, fmt.Errorf("unpack: %w", err)
	}
	if err := os.Rename(tmp, dest); err != nil {
		_ = os.RemoveAll(tmp)
		// Another server sharing the cache renamed its copy first.
		if _, serr := os.Stat(dest); serr == nil {
			return dest, false, nil
		}
		return "", false, fmt.Errorf("unpack: %w", err)
	}
	return dest, true, nil
}

// contentHash is the SHA-256 of the archive's bytes, read from the index
// when the same file (path, size, modification time, inode) was hashed
// before.
func (c *Cache) contentHash(archive string, info fs.FileInfo) (string, error) {
	abs, err := filepath.Abs(archive)
	if err != nil {
		return "", err
	}
	var ino uint64
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	stamp := sha256.Sum256(fmt.Appendf(nil, "%s|%d|%d|%d", abs, info.Size(), info.ModTime().UnixNano(), ino))
	index := filepath.Join(c.dir, "index", hex.EncodeToString(stamp[:16]))
	if b, err := os.ReadFile(index); err == nil && len(b) == 64 {
		return string(b), nil
	}
	f, err := os.Open(archive)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if err := os.MkdirAll(filepath.Dir(index), 0o755); err != nil {
		return "", err
	}
	// Written whole and renamed: a reader sees all of it or nothing.
	tmp := fmt.Sprintf("%s.%d.tmp", index, os.Getpid())
	if err := os.WriteFile(tmp, []byte(sum), 0o644); err == nil {
		_ = os.Rename(tmp, index)
	}
	return sum, nil
}

// untar extracts a tar or gzip-compressed tar into dest, refusing entries
// that would land outside it.
func untar(archive, dest string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(archive, ".gz") || strings.HasSuffix(archive, ".tgz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			return err
		}
		defer gz.Close()
		r = gz
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		path, err := inside(dest, h.Name)
		if err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeReg:
			if err = os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
				err = writeFile(path, tr, fs.FileMode(h.Mode)&0o777)
			}
		case tar.TypeSymlink:
			if err = os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
				err = os.Symlink(h.Linkname, path)
			}
		case tar.TypeLink:
			var target string
			if target, err = inside(dest, h.Linkname); err == nil {
				if err = os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
					err = os.Link(target, path)
				}
			}
		}
		if err != nil {
			return err
		}
	}
}

// inside is name's path under dest, or an error if it escapes dest.
func inside(dest, name string) (string, error) {
	clean := filepath.Clean(name)
	if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("entry %q escapes the archive", name)
	}
	return filepath.Join(dest, clean), nil
}

func writeFile(path string, r io.Reader, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
