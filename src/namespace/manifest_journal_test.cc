// ManifestJournal on its own: a failed write keeps the batch and refuses
// mutations with the store's errno; the kept batches go in, in order, once
// the store takes writes again.
#include "namespace/manifest_journal.h"

#include <gtest/gtest.h>

#include <cerrno>

#include "manifest/memory_manifest_store.h"

namespace ckptfs {
namespace {

ManifestBatch PutMeta(const std::string& key, const std::string& value) {
  ManifestBatch b;
  b.Put(KeySpace::kMeta, key, value);
  return b;
}

std::optional<std::string> Meta(MemoryManifestStore& store, const std::string& key) {
  auto v = store.Get(KeySpace::kMeta, key);
  EXPECT_TRUE(v.ok());
  return v.ok() ? *v : std::nullopt;
}

TEST(ManifestJournalTest, KeepsFailedBatchesAndWritesThemInOrderOnRecovery) {
  MemoryManifestStore store;
  ManualClock clock;
  EventLog events;
  ManifestJournal journal(&store, &clock, &events);
  ASSERT_TRUE(journal.Apply(PutMeta("a", "1"), true).ok());
  ASSERT_TRUE(journal.CheckWritable().ok());

  store.FailWritesAfter(0, ENOSPC);
  Status st = journal.Apply(PutMeta("a", "2"), true);
  EXPECT_EQ(st.err(), ENOSPC) << st.ToString();
  EXPECT_FALSE(journal.healthy());
  // Later changes are refused up front and, from paths that cannot refuse,
  // kept behind the first.
  EXPECT_EQ(journal.CheckWritable().err(), ENOSPC);
  EXPECT_EQ(journal.Apply(PutMeta("a", "3"), false).err(), ENOSPC);
  EXPECT_EQ(Meta(store, "a"), "1");
  ManifestHealth h = journal.Health();
  EXPECT_FALSE(h.ok);
  EXPECT_EQ(h.pending_batches, 2u);
  EXPECT_NE(events.Render().find("manifest_error"), std::string::npos);

  // Still full: a retry changes nothing.
  EXPECT_FALSE(journal.TryRecover());
  store.ClearFailure();
  // CheckWritable retries by itself, but not more often than every 200 ms.
  clock.Advance(250'000'000);
  EXPECT_TRUE(journal.CheckWritable().ok());
  EXPECT_TRUE(journal.healthy());
  EXPECT_EQ(Meta(store, "a"), "3");  // both kept batches, in order
  EXPECT_NE(events.Render().find("manifest_recovered"), std::string::npos);
}

TEST(ManifestJournalTest, ALaterBatchGoesBeforeTheNextAndIsKeptWhenItFails) {
  MemoryManifestStore store;
  ManualClock clock;
  EventLog events;
  ManifestJournal journal(&store, &clock, &events);
  journal.ApplyLater(PutMeta("d", "1"));
  EXPECT_TRUE(journal.HasLater());
  EXPECT_EQ(Meta(store, "d"), std::nullopt);  // not written yet
  // The next change writes it first, so the store sees the change order,
  // even when the next change is one the caller would undo (a commit).
  ASSERT_TRUE(journal.Apply(PutMeta("d", "2"), true, /*keep_on_failure=*/false).ok());
  EXPECT_FALSE(journal.HasLater());
  EXPECT_EQ(Meta(store, "d"), "2");

  // A store that refuses it keeps it, as any change, for the recovery.
  journal.ApplyLater(PutMeta("e", "1"));
  store.FailWritesAfter(0, ENOSPC);
  EXPECT_EQ(journal.WriteLater().err(), ENOSPC);
  EXPECT_FALSE(journal.HasLater());
  EXPECT_EQ(journal.Health().pending_batches, 1u);
  store.ClearFailure();
  EXPECT_TRUE(journal.TryRecover());
  EXPECT_EQ(Meta(store, "e"), "1");
  EXPECT_TRUE(journal.WriteLater().ok());  // nothing left: nothing written
}

TEST(ManifestJournalTest, BatchNotKeptWhenTheCallerUndoesItself) {
  MemoryManifestStore store;
  ManualClock clock;
  EventLog events;
  ManifestJournal journal(&store, &clock, &events);
  store.FailWritesAfter(0, EIO);
  EXPECT_EQ(journal.Apply(PutMeta("b", "1"), true, /*keep_on_failure=*/false).err(), EIO);
  EXPECT_EQ(journal.Health().pending_batches, 0u);
  store.ClearFailure();
  EXPECT_TRUE(journal.TryRecover());
  EXPECT_EQ(Meta(store, "b"), std::nullopt);
}

TEST(ManifestJournalTest, DivergedNeedsARemount) {
  MemoryManifestStore store;
  ManualClock clock;
  EventLog events;
  ManifestJournal journal(&store, &clock, &events);
  store.FailWritesAfter(0, ENOSPC);
  (void)journal.Apply(PutMeta("c", "1"), true);
  journal.MarkDiverged();
  store.ClearFailure();
  clock.Advance(1'000'000'000);
  EXPECT_FALSE(journal.TryRecover());
  Status st = journal.CheckWritable();
  EXPECT_EQ(st.err(), ENOSPC);
  EXPECT_NE(st.message().find("remount"), std::string::npos) << st.ToString();
  EXPECT_TRUE(journal.Health().needs_restart);
}

}  // namespace
}  // namespace ckptfs
