/* The smallest KVM program: opens /dev/kvm, asks KVM_GET_API_VERSION, makes a VM with
 * KVM_CREATE_VM and a vCPU with KVM_CREATE_VCPU, prints what it got and exits 0 only
 * if all of that worked. tools/testhost/selftest runs it inside the test host. */
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

int main(void)
{
    int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (kvm < 0) {
        printf("open /dev/kvm: %s\n", strerror(errno));
        return 1;
    }
    int api = ioctl(kvm, KVM_GET_API_VERSION, 0);
    printf("KVM_GET_API_VERSION = %d\n", api);
    int vm = ioctl(kvm, KVM_CREATE_VM, 0);
    if (vm < 0) {
        printf("KVM_CREATE_VM: %s\n", strerror(errno));
        return 1;
    }
    printf("KVM_CREATE_VM = fd %d\n", vm);
    int vcpu = ioctl(vm, KVM_CREATE_VCPU, 0);
    if (vcpu < 0) {
        printf("KVM_CREATE_VCPU: %s\n", strerror(errno));
        return 1;
    }
    printf("KVM_CREATE_VCPU = fd %d\n", vcpu);
    printf("KVM_CAP_NR_MEMSLOTS = %d\n", ioctl(kvm, KVM_CHECK_EXTENSION, KVM_CAP_NR_MEMSLOTS));
    return api == KVM_API_VERSION ? 0 : 1;
}
