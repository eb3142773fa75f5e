// The overlayfs options of the writable root (guest-init/overlay_root.hpp).
#include <catch2/catch.hpp>

#include "guest-init/overlay_root.hpp"

using namespace nanovm::guest_init;

TEST_CASE("the overlay root's lower layer is / and upper/work sit on the layer", "[guest-init][overlay]") {
    CHECK(overlay_mount_options("/run/nanovm-overlay/layer") ==
          "lowerdir=/,upperdir=/run/nanovm-overlay/layer/upper,workdir=/run/nanovm-overlay/layer/work");
}
