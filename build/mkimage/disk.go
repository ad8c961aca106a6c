package main

import (
	"flag"
	"fmt"
	"os"
	"text/tabwriter"

	"cairn.dev/cairn/build/disk"
)

func diskCmd(args []string) error {
	fs := flag.NewFlagSet("disk", flag.ExitOnError)
	ukiPath := fs.String("uki", "", "unified kernel image to boot")
	systemPath := fs.String("system", "", "system image (with its hash tree) for system-a; empty leaves both slots empty")
	size := fs.Int64("size-mib", disk.DefaultSize/disk.MiB, "image size in MiB")
	espSize := fs.Int64("esp-mib", disk.DefaultESPSize/disk.MiB, "EFI system partition size in MiB")
	systemSize := fs.Int64("system-mib", disk.DefaultSystemSize/disk.MiB, "size of each system slot in MiB")
	out := fs.String("o", "", "output file")
	fs.Parse(args)
	if err := need(map[string]string{"uki": *ukiPath, "o": *out}); err != nil {
		return err
	}
	c := disk.Config{
		Size:       *size * disk.MiB,
		ESPSize:    *espSize * disk.MiB,
		SystemSize: *systemSize * disk.MiB,
		System:     *systemPath,
		Files:      map[string]string{disk.BootPath: *ukiPath},
		Dirs:       []string{"/cairn"},
	}
	tmp := *out + ".tmp"
	if err := disk.Write(tmp, c); err != nil {
		return err
	}
	if err := os.Rename(tmp, *out); err != nil {
		return err
	}
	contents := map[string]string{
		disk.ESPName:     "FAT32: " + disk.BootPath + " " + fileSize(*ukiPath),
		disk.SystemAName: "empty",
		disk.SystemBName: "empty, reserved for A/B updates",
	}
	if *systemPath != "" {
		contents[disk.SystemAName] = "system image " + fileSize(*systemPath) + ", verified by dm-verity"
	}
	fmt.Printf("image: disk %s, %d MiB, sparse:\n", *out, *size)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	for _, p := range c.Partitions() {
		fmt.Fprintf(w, "  %s\t%d MiB\tat %d MiB\t%s\n", p.Name, p.Size/disk.MiB, p.Start/disk.MiB, contents[p.Name])
	}
	fmt.Fprintf(w, "  free\t%d MiB\tat %d MiB\tthe data partition, made on first boot (on a larger disk, all of it)\n",
		c.Free()/disk.MiB, (c.Size-disk.MiB-c.Free())/disk.MiB)
	return w.Flush()
}

// fileSize returns the size of the file at path for a report.
func fileSize(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return "(size unknown)"
	}
	return mb(st.Size())
}
