// Package declarative describes a directory tree as Go structs, so that
// code reaches files through typed fields instead of path strings:
//
//	type Cairn struct {
//		declarative.Directory
//		SealedConfiguration declarative.File `file:"sealed_configuration.pb"`
//	}
//	type ESP struct {
//		declarative.Directory
//		Cairn Cairn `dir:"cairn"`
//	}
//
// Place walks such a struct once and gives every Directory and File its
// full path under a mount point; afterwards esp.Cairn.SealedConfiguration
// .Write(b) writes <mount point>/cairn/sealed_configuration.pb. A typo in a
// path is a compile error, and moving a directory is one tag.
//
// Writes are atomic: a reader sees the old content or the new, never a
// mixture, also across a power cut (temporary file, fsync, rename, fsync
// of the directory).
package declarative

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
)

// Directory is a directory of the tree. Embed it in a struct to make the
// struct a directory with children, or use it as a field for a leaf
// directory.
type Directory struct {
	path string
}

// FullPath is the directory's path, valid after Place.
func (d *Directory) FullPath() string { return d.path }

// MkdirAll creates the directory and its parents.
func (d *Directory) MkdirAll(perm os.FileMode) error {
	if d.path == "" {
		return errors.New("directory was never placed")
	}
	if err := os.MkdirAll(d.path, perm); err != nil {
		return fmt.Errorf("when creating %s: %w", d.path, err)
	}
	return nil
}

// File is a file of the tree.
type File struct {
	path string
}

// FullPath is the file's path, valid after Place.
func (f *File) FullPath() string { return f.path }

// Read returns the file's content. Its error wraps os.ErrNotExist when the
// file is absent.
func (f *File) Read() ([]byte, error) {
	if f.path == "" {
		return nil, errors.New("file was never placed")
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return nil, fmt.Errorf("when reading %s: %w", f.path, err)
	}
	return b, nil
}

// Exists reports whether the file is there.
func (f *File) Exists() (bool, error) {
	_, err := os.Stat(f.path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("when looking for %s: %w", f.path, err)
}

// Write replaces the file's content atomically, readable by its owner
// only: everything Cairn keeps on the ESP is secret or tamper-sensitive.
func (f *File) Write(data []byte) error {
	if f.path == "" {
		return errors.New("file was never placed")
	}
	return f.WriteFrom(bytes.NewReader(data))
}

// WriteFrom is Write with the content read from r to its end, for content
// too large to hold in memory whole. When reading r fails, the file keeps
// its old content.
func (f *File) WriteFrom(r io.Reader) error {
	if f.path == "" {
		return errors.New("file was never placed")
	}
	if err := writeAtomic(f.path, r); err != nil {
		return fmt.Errorf("when writing %s: %w", f.path, err)
	}
	return nil
}

// writeAtomic writes a temporary file beside path (os.CreateTemp makes it
// 0600), syncs it, renames it over path, syncs it again and syncs the
// directory.
//
// The second sync is for the ESP's vfat, which keeps a file's size and
// first cluster in its directory entry: a rename writes a new entry with
// neither, and fills them in only when the file's inode is next written
// back. Syncing the directory alone makes that empty entry durable, and a
// power cut before the writeback, some 30 seconds later, leaves a file of
// 0 bytes in place of both the old content and the new. Syncing the
// renamed file writes its entry whole. (TestPowerCut, test/e2e, found it:
// registration keys written a few seconds before a cut came back empty.)
func writeAtomic(path string, r io.Reader) error {
	dir, name := filepath.Split(path)
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	defer tmp.Close()           // a second Close fails harmlessly
	if _, err := io.Copy(tmp, r); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// The descriptor follows the file to its new name.
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Remove deletes the file; an absent file is no error.
func (f *File) Remove() error {
	if err := os.Remove(f.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("when removing %s: %w", f.path, err)
	}
	return nil
}

var (
	directoryType = reflect.TypeFor[Directory]()
	fileType      = reflect.TypeFor[File]()
)

// Place gives every Directory and File in the struct root points to its
// path under at. Fields are tagged `dir:"name"` (a Directory or a struct
// embedding one) or `file:"name"` (a File); names are single path
// elements.
func Place(root any, at string) error {
	v := reflect.ValueOf(root)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("place: %T is not a pointer to a struct", root)
	}
	return place(v.Elem(), filepath.Clean(at))
}

func place(v reflect.Value, at string) error {
	if v.Type() == directoryType {
		v.Addr().Interface().(*Directory).path = at
		return nil
	}
	t := v.Type()
	embedsDir := false
	for i := range t.NumField() {
		sf := t.Field(i)
		fv := v.Field(i)
		if sf.Anonymous && sf.Type == directoryType {
			fv.Addr().Interface().(*Directory).path = at
			embedsDir = true
			continue
		}
		dir, isDir := sf.Tag.Lookup("dir")
		file, isFile := sf.Tag.Lookup("file")
		switch {
		case isDir && isFile:
			return fmt.Errorf("place: field %s.%s has both dir and file tags", t.Name(), sf.Name)
		case isFile:
			if sf.Type != fileType {
				return fmt.Errorf("place: field %s.%s is tagged file but is a %s", t.Name(), sf.Name, sf.Type)
			}
			if err := checkName(file); err != nil {
				return fmt.Errorf("place: field %s.%s: %w", t.Name(), sf.Name, err)
			}
			fv.Addr().Interface().(*File).path = filepath.Join(at, file)
		case isDir:
			if sf.Type.Kind() != reflect.Struct {
				return fmt.Errorf("place: field %s.%s is tagged dir but is a %s", t.Name(), sf.Name, sf.Type)
			}
			if err := checkName(dir); err != nil {
				return fmt.Errorf("place: field %s.%s: %w", t.Name(), sf.Name, err)
			}
			if err := place(fv, filepath.Join(at, dir)); err != nil {
				return err
			}
		case sf.Type == fileType || sf.Type == directoryType:
			return fmt.Errorf("place: field %s.%s has no dir or file tag", t.Name(), sf.Name)
		}
	}
	if !embedsDir {
		return fmt.Errorf("place: %s does not embed declarative.Directory", t)
	}
	return nil
}

func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("%q is not a single path element", name)
	}
	return nil
}
