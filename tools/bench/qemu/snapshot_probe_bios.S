# The snapshot benchmark's probe guest for QEMU (tools/bench/run snapshot), as a
# 64 KiB -bios image: the same memory as nanovm's probe (tests/kvm/snapshot_bench.cpp
# and tests/kvm/snapshot_probe.hpp), written by the guest itself.
#   - reset vector (offset 0xFFF0) -> far jump to F000:0000 (offset 0 = GPA 0xF0000)
#   - flat 32-bit protected mode, GDT kept in this ROM (descriptors with the accessed
#     bit already set, 0x9B/0x93: the CPU cannot write it into ROM)
#   - makes [32 MiB, 288 MiB) non-zero: the first 8-byte word of each page = its GPA ^
#     0x5a5a5a5a5a5a5a5a (snapshot_bench's fill() writes every word the same way). The
#     same 65536 non-zero pages, which QEMU's migration sends whole; one store per page
#     because on a PVM /dev/kvm this code runs in KVM's instruction emulator (every
#     word took ~90 s there, measured 2026-11-30).
#   - writes 'R' to the debug console port 0x402 (isa-debugcon): the harness waits for it
#   - then vCPU 0's counter loop of the nanovm probe (snapshot_probe.hpp, standard_loop(0)):
#     increments the dword at 0x3000 and stores it into the next page of [1 MiB, 9 MiB).
# The application processor stays in wait-for-SIPI (nanovm's probe runs a loop on both).
# Build: as --32 -o probe.o snapshot_probe_bios.S && objcopy -O binary -j .text probe.o probe.bin
	.set	ROM_BASE, 0xF0000		# GPA of offset 0 (the image's last 64 KiB below 1 MiB)
	.set	FILL_BEGIN, 32 << 20
	.set	FILL_END, 288 << 20
	.set	SALT, 0x5a5a5a5a
	.set	COUNTER, 0x3000
	.set	AREA_BEGIN, 1 << 20
	.set	AREA_END, 9 << 20

	.text
	.code16
start16:
	cli
	cld
	lgdtl	%cs:(gdt_ptr - start16)
	movl	%cr0, %eax
	orl	$1, %eax			# CR0.PE
	movl	%eax, %cr0
	ljmpl	$0x08, $(start32 - start16 + ROM_BASE)

	.code32
start32:
	movw	$0x10, %ax
	movw	%ax, %ds
	movw	%ax, %es
	movw	%ax, %ss
	movl	$FILL_BEGIN, %edi
fill:
	movl	%edi, %eax
	xorl	$SALT, %eax
	movl	%eax, (%edi)			# low dword: GPA ^ salt
	movl	$SALT, 4(%edi)			# high dword: 0 ^ salt (GPA < 4 GiB)
	addl	$4096, %edi			# next page
	cmpl	$FILL_END, %edi
	jb	fill
	movb	$'R', %al
	movw	$0x402, %dx
	outb	%al, %dx
lap:
	movl	$AREA_BEGIN, %esi
step:
	movl	COUNTER, %eax
	incl	%eax
	movl	%eax, COUNTER
	movl	%eax, (%esi)
	addl	$4096, %esi
	cmpl	$AREA_END, %esi
	jb	step
	jmp	lap

	.p2align 3
gdt:
	.quad	0
	.quad	0x00CF9B000000FFFF		# 0x08: code, base 0, 4 GiB, 32-bit, accessed
	.quad	0x00CF93000000FFFF		# 0x10: data, base 0, 4 GiB, accessed
gdt_end:
gdt_ptr:
	.word	gdt_end - gdt - 1
	.long	gdt - start16 + ROM_BASE

	.org	0xFFF0
	.code16
reset:						# CS base 0xFFFF0000, IP 0xFFF0 at reset
	ljmp	$0xF000, $0
	.org	0x10000, 0xF4			# pad with hlt to 64 KiB
