-- Every dataset the ledger knows: it was charged, ran, or has a lifetime budget (`dpngram ledger`
-- names them when asked for an unknown one). Keys only.
SELECT dataset FROM ledger.privacy_spend
UNION SELECT dataset FROM ledger.runs
UNION SELECT dataset FROM ledger.lifetime_budget
ORDER BY dataset;
