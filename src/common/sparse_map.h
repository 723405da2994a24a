// SparseMap<K, V>: the part of std::map's interface the namespace uses, with
// the map on the heap and made at the first insertion, so that an empty one
// costs one pointer instead of a std::map's 48 bytes. Every Inode has entry
// maps (a directory's children, by name and by readdir cookie) and an xattr
// map, and most inodes, files, never put anything in them (issue 29 counts
// bytes per namespace entry). Reads of an empty one see a shared empty map,
// so find() == end() and iteration work as on a std::map; clear() gives the
// memory back. Iterators are std::map's and follow its invalidation rules,
// plus: clear() invalidates them all.
#pragma once

#include <map>
#include <memory>

namespace ckptfs {

template <typename K, typename V>
class SparseMap {
 public:
  using Map = std::map<K, V>;
  using iterator = typename Map::iterator;
  using const_iterator = typename Map::const_iterator;

  SparseMap() = default;
  SparseMap(const SparseMap& other) : m_(other.m_ ? std::make_unique<Map>(*other.m_) : nullptr) {}
  SparseMap(SparseMap&&) noexcept = default;
  SparseMap& operator=(const SparseMap& other) {
    if (this != &other) m_ = other.m_ ? std::make_unique<Map>(*other.m_) : nullptr;
    return *this;
  }
  SparseMap& operator=(SparseMap&&) noexcept = default;

  bool empty() const { return !m_ || m_->empty(); }
  size_t size() const { return m_ ? m_->size() : 0; }
  size_t count(const K& key) const { return m_ ? m_->count(key) : 0; }

  iterator begin() { return Read().begin(); }
  iterator end() { return Read().end(); }
  const_iterator begin() const { return Read().begin(); }
  const_iterator end() const { return Read().end(); }
  iterator find(const K& key) { return Read().find(key); }
  const_iterator find(const K& key) const { return Read().find(key); }
  iterator lower_bound(const K& key) { return Read().lower_bound(key); }
  const_iterator lower_bound(const K& key) const { return Read().lower_bound(key); }
  iterator upper_bound(const K& key) { return Read().upper_bound(key); }
  const_iterator upper_bound(const K& key) const { return Read().upper_bound(key); }
  // std::out_of_range when absent, as std::map::at.
  const V& at(const K& key) const { return Read().at(key); }

  V& operator[](const K& key) { return Write()[key]; }
  size_t erase(const K& key) { return m_ ? m_->erase(key) : 0; }
  iterator erase(iterator it) { return m_->erase(it); }
  void clear() { m_.reset(); }

 private:
  // The map to read: this one's, or the shared empty one. Nothing is ever
  // inserted through the shared one: inserting goes through Write().
  Map& Read() const { return m_ ? *m_ : EmptyMap(); }
  Map& Write() {
    if (!m_) m_ = std::make_unique<Map>();
    return *m_;
  }
  static Map& EmptyMap() {
    static Map empty;
    return empty;
  }

  std::unique_ptr<Map> m_;
};

}  // namespace ckptfs
