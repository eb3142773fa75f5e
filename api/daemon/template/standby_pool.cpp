// The daemon's standby pool (standby_pool.hpp).
#include "api/daemon/template/standby_pool.hpp"

#include <algorithm>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "api/vm/paths.hpp"
#include "api/vm/standby_keeper.hpp"
#include "vmm/log.hpp"

namespace nanovm::daemon {

namespace fs = std::filesystem;

StandbyPool::StandbyPool(std::string dir, uint32_t max_standbys) : dir_(std::move(dir)), max_(max_standbys) {
    std::error_code ec;
    fs::remove_all(dir_, ec);  // a previous daemon's sockets (its standbys ended with it)
    if (max_ > 0) fs::create_directories(dir_, ec);
}

StandbyPool::~StandbyPool() = default;

std::string StandbyPool::shape_dir(const Shape& shape) const {
    return fmt::format("{}/{}x{}", dir_, shape.first, shape.second);
}

void StandbyPool::note_use(uint32_t cpus, uint32_t memory_mb, const std::function<int64_t()>& headroom_mb) {
    if (max_ == 0) return;
    std::lock_guard lock(mutex_);
    const Shape shape{cpus, memory_mb};
    ++uses_[shape];
    // The most used shapes, ties to the one kept already (no churn between equals).
    std::vector<Shape> order;
    for (const auto& [s, n] : uses_) order.push_back(s);
    std::stable_sort(order.begin(), order.end(), [this](const Shape& a, const Shape& b) {
        if (uses_[a] != uses_[b]) return uses_[a] > uses_[b];
        return keepers_.count(a) > keepers_.count(b);
    });
    if (order.size() > max_) order.resize(max_);
    for (auto it = keepers_.begin(); it != keepers_.end();) {
        if (std::find(order.begin(), order.end(), it->first) == order.end()) {
            log_line(fmt::format("standby pool: no longer keeping a {} x {} MiB standby", it->first.first, it->first.second));
            it = keepers_.erase(it);  // SIGTERMs its unclaimed standby
        } else {
            ++it;
        }
    }
    std::optional<int64_t> headroom;  // asked once, only if a shape needs a standby
    for (const Shape& s : order) {
        if (keepers_.count(s)) continue;
        if (!headroom) {
            headroom = headroom_mb();
            for (const auto& [kept, keeper] : keepers_) *headroom -= kept.second;
        }
        if (*headroom < int64_t{s.second}) continue;  // the sandboxes' memory first (yield())
        *headroom -= s.second;
        const std::string dir = shape_dir(s);
        std::error_code ec;
        fs::create_directories(dir, ec);
        if (ec) {
            log_line(fmt::format("standby pool: {}: {}", dir, ec.message()));
            continue;
        }
        auto keeper = std::make_unique<vm::StandbyKeeper>(self_executable(), dir, dir + "/standby.log", s.first,
                                                          uint64_t{s.second} << 20, 1);
        keeper->start();
        log_line(fmt::format("standby pool: keeping a {} x {} MiB standby", s.first, s.second));
        keepers_.emplace(s, std::move(keeper));
    }
}

int64_t StandbyPool::yield(int64_t need_mb) {
    std::lock_guard lock(mutex_);
    int64_t freed = 0;
    while (freed < need_mb && !keepers_.empty()) {
        auto least = keepers_.begin();
        for (auto it = keepers_.begin(); it != keepers_.end(); ++it)
            if (uses_[it->first] < uses_[least->first]) least = it;
        log_line(fmt::format("standby pool: the {} x {} MiB standby ended: a sandbox needs its memory", least->first.first,
                             least->first.second));
        freed += least->first.second;
        keepers_.erase(least);  // SIGTERMs its unclaimed standby
    }
    return freed;
}

std::vector<std::string> StandbyPool::sockets(uint32_t cpus, uint32_t memory_mb) {
    std::lock_guard lock(mutex_);
    const Shape shape{cpus, memory_mb};
    if (!keepers_.count(shape)) return {};
    return vm::standby_sockets(shape_dir(shape));
}

int64_t StandbyPool::memory_mb() {
    std::lock_guard lock(mutex_);
    int64_t total = 0;
    for (const auto& [s, keeper] : keepers_) total += s.second;
    return total;
}

size_t StandbyPool::size() {
    std::lock_guard lock(mutex_);
    return keepers_.size();
}

}  // namespace nanovm::daemon
